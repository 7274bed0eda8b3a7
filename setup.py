from setuptools import find_packages, setup

setup(
    name="argtca",
    version="0.1.0",
    description="Calibrated test-time adaptation of CLIP: ArgTCA, TCA, TPT, C-TPT, O-TPT, A-TPT",
    # configs/ (the trainers' and datasets' YAMLs) stays at the top of the checkout, where the
    # scripts and docs name it; an installed package carries it as argtca/configs
    # (argtca/config/paths.py resolves either)
    # benchmarks/rates (the whole-table benchmark's measured rates, read by table1 --plan) ships
    # as argtca/rates likewise
    packages=find_packages(include=["argtca", "argtca.*"]) + ["argtca.configs", "argtca.rates"],
    package_dir={"argtca.configs": "configs", "argtca.rates": "benchmarks/rates"},
    package_data={"argtca": ["demo/assets/*", "models/model_configs/*.json",
                            "report/reference/*.csv"],
                  "argtca.configs": ["datasets/*.yaml", "trainers/*.yaml"],
                  "argtca.rates": ["*.json"]},
    include_package_data=True,
    python_requires=">=3.10",
    install_requires=[
        "torch>=2.1", "torchvision", "open_clip_torch>=3.0", "torch_geometric>=2.5",
        "yacs", "numpy", "pillow", "tqdm", "matplotlib", "filelock>=3.12",
        # python -m argtca.experiments ... --launcher slurm|local (SLURM job arrays)
        "submitit>=1.5",
    ],
    extras_require={
        # sybil: tests/docs parses README.md's and docs/*.md's code blocks with it
        "test": ["pytest", "pytest-xdist", "ruff", "sybil>=10"],
        # python -m argtca.attributes generate (any OpenAI-compatible chat endpoint)
        "llm": ["openai>=1.0"],
        # what Dassl.pytorch (GitHub only; README "Inside Dassl/CoOp") and CoOp's train.py import
        # at run time; Dassl's own requirements.txt also pins old linters it never imports
        "dassl": ["yacs", "gdown", "tabulate", "tqdm", "scipy", "scikit-learn", "tensorboard",
                  "future", "ftfy", "regex", "wilds==1.2.2"],
    },
)
