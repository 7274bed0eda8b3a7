"""What a run prints besides its result: progress on stderr (a bar on a terminal, one line per
10 % in a log file), no third-party deprecation warnings, a cut selection saying where the rest
is, and `attributes generate` naming --no-rank when the CLIP weights fail."""
import io
import json
import subprocess
import sys

import pytest

from argtca.utils.console import LogProgress, progress
from conftest import REPO


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_in_a_log_is_one_line_per_ten_percent():
    f = io.StringIO()
    bar = progress(40, desc="TPT Demo", file=f)
    assert isinstance(bar, LogProgress)
    for i in range(40):
        bar.update(1)
        bar.set_postfix(acc=f"{100.0 * (i % 2):.2f}")
    bar.close()
    lines = f.getvalue().splitlines()
    assert "\r" not in f.getvalue() and len(lines) == 10          # 10 %, 20 %, ..., 100 %
    assert [ln.split(":")[1].split("%")[0].strip() for ln in lines] == \
        [str(p) for p in range(10, 101, 10)]
    assert lines[0].startswith("TPT Demo: 10% (4/40), acc=100.00, ") and "s left" in lines[0]
    assert lines[-1].startswith("TPT Demo: 100% (40/40), acc=100.00, ")
    # resumed at 25 %: the next line is at 30 %, not a repeat of 10 % and 20 %
    f = io.StringIO()
    bar = progress(40, initial=10, desc="x", file=f)
    bar.update(2)
    bar.close()
    assert f.getvalue().startswith("x: 30% (12/40), 0 s") and len(f.getvalue().splitlines()) == 1


def test_progress_on_a_terminal_is_tqdm_and_nothing_when_quiet():
    from tqdm import tqdm
    bar = progress(5, desc="x", file=_Tty())
    assert isinstance(bar, tqdm) and not bar.disable
    bar.close()
    f = io.StringIO()
    bar = progress(5, desc="x", file=f, enabled=False)
    bar.update(5)
    bar.close()
    assert f.getvalue() == ""


def test_run_progress_goes_to_stderr_and_the_cut_selection_says_where_the_rest_is(
        tmp_path, capsys):
    from argtca.run import main
    rc = main(["--output-dir", str(tmp_path / "run"),
               "--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"),
               "--config-file", str(REPO / "configs/trainers/argtca.yaml"),
               "MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
               "INPUT.SIZE", "(32, 32)", "DATASET.NUM_IMAGES", "4", "TTA.N_VIEWS", "2",
               "USE_CUDA", "False", "DATALOADER.NUM_WORKERS", "0",
               "TRAINER.ARGTCA.GAT.EPOCHS", "2", "TRAINER.ARGTCA.EMBEDDINGS", "raw"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "\r" not in cap.out and "\r" not in cap.err and "ArgTCA (div) Demo" not in cap.out
    lines = [ln for ln in cap.err.splitlines() if ln.startswith("ArgTCA (div) Demo: ")]
    # 4 images, one per batch on the CPU: each crosses another multiple of 10 %
    assert [ln.split(": ")[1].split(" ")[0] for ln in lines] == ["25%", "50%", "75%", "100%"]
    # the demo's 16 classes: five shown, the rest in the run folder's phase1.json
    shown = [ln for ln in cap.out.splitlines() if ln.startswith("[phase 1] div: ")]
    assert len(shown) == 6 and shown[-1] == "[phase 1] div: (11 more in phase1.json)"
    picks = json.loads((tmp_path / "run" / "phase1.json").read_text())["selected"]
    assert len(picks) == 16


def test_cli_silences_torch_geometric_jit_deprecation():
    code = ("import sys; sys.path.insert(0, {repo!r}); {call}"
            "import torch_geometric.nn")
    call = "from argtca.run import main; main(['--config-file', '/nonexistent.yaml']); "
    env_code = [sys.executable, "-W", "default", "-c"]
    plain = subprocess.run(env_code + [code.format(repo=str(REPO), call="")],
                           capture_output=True, text=True, timeout=300)
    if "torch.jit.script` is deprecated" not in plain.stderr:
        pytest.skip("this torch / torch_geometric does not warn")
    cli = subprocess.run(env_code + [code.format(repo=str(REPO), call=call)],
                         capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    assert "FutureWarning" not in cli.stderr
    assert "error: --config-file not found: /nonexistent.yaml" in cli.stderr


def test_generate_names_no_rank_when_the_clip_weights_fail(tmp_path, capsys):
    pytest.importorskip("openai")
    from argtca.attributes.generate import main as generate_main
    classes = tmp_path / "classes.txt"
    classes.write_text("red fox\ntabby cat\n")
    rc = generate_main(["--classes", str(classes), "--out", str(tmp_path / "a.json"),
                        "--base-url", "http://127.0.0.1:9/v1", "--model", "fake",
                        "MODEL.PRETRAINED", str(tmp_path / "missing.pt")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "MODEL.PRETRAINED checkpoint not found" in err[0]
    assert err[0].endswith("(or pass --no-rank: no CLIP weights needed, the attributes keep "
                           "the model's order)")
    assert not (tmp_path / "a.json").exists()
