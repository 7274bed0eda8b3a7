"""python -m argtca.attributes generate: requests through the real openai client to a local
OpenAI-compatible server (scripted answers: good, malformed, 429 with Retry-After, a timeout, JSON
mode refused), strict parsing and normalisation, CLIP ranking against a hand-computed order, the
answer cache, --resume, the summary, and the API key never written or printed."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("openai")

from argtca.attributes import load_attributes                      # noqa: E402
from argtca.attributes.generate import generate, main, read_class_file  # noqa: E402
from argtca.attributes.llm import ChatClient, GenerationError, LLMConfig  # noqa: E402
from argtca.attributes.prompt import (AnswerError, BUILTIN_EXAMPLES, build_messages,  # noqa: E402
                                      normalize_attributes, parse_answer)
from argtca.attributes.rank import AttributeRanker                  # noqa: E402
from helpers_llm import FakeChatServer, answer                     # noqa: E402

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-SENTINEL-4f1c9e-do-not-leak"
TINY_CLIP = ["MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    for k in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(k, raising=False)


def _client(url, sleeps, **kw):
    cfg = LLMConfig(model="fake-model", base_url=url, api_key=kw.pop("api_key", KEY),
                    timeout=kw.pop("timeout", 5.0), backoff=0.25, **kw)
    return ChatClient(cfg, sleep=sleeps.append, log=lambda m: None)


def test_parse_answer_is_strict():
    assert parse_answer('{"attributes": ["a", "b"]}') == ["a", "b"]
    assert parse_answer('```json\n{"attributes": ["a"]}\n```') == ["a"]
    for bad in ("", "a, b, c", '["a", "b"]', '{"attrs": ["a"]}', '{"attributes": "a b"}',
                '{"attributes": [1, 2]}', '{"attributes": []}', 'Sure! {"attributes": ["a"]}'):
        with pytest.raises(AnswerError):
            parse_answer(bad)


def test_normalize_attributes_by_hand():
    items = ["Big Cat", "SPOTS", "spots", "Leopard", "leopards", "long_tail.", "None", "",
             "a very long sentence about it", "big-cat", "Forest!", "yellow-fur"]
    attrs, dropped = normalize_attributes(items, "leopard")
    assert attrs == ["big-cat", "spots", "long-tail", "forest", "yellow-fur"]
    assert dropped == {"repeats": 2, "the class name itself": 2, "empty or 'none'": 2,
                       "longer than 4 words": 1}
    # multi-word class names are removed in their hyphenated form
    assert normalize_attributes(["Apple Pie", "crust"], "apple pie")[0] == ["crust"]


def test_retries_timeout_rate_limit_and_bad_answers(tmp_path):
    classes = ["red apple", "blue car", "green leaf", "yellow banana"]
    script = {
        "red apple": [answer(["Round shape", "RED", "stem", "red apple", "stem", "shiny!", "None",
                              "a very long sentence that is not an attribute"])],
        "blue car": [("raw", "Sure! Here are the attributes: wheels, doors"),
                     answer(["wheels", "doors"])],
        "green leaf": [("status", 429, {"Retry-After": "2"}), answer(["veins", "green"])],
        "yellow banana": [("sleep", 1.5, answer(["never-read"])), answer(["peel", "curved"])],
    }
    sleeps, out = [], tmp_path / "attrs.json"
    with FakeChatServer(script) as srv:
        client = _client(srv.url, sleeps, timeout=0.5)
        s = generate(classes, str(out), client, num=3, ask=5, say=lambda m: None)
    assert srv.classes_asked() == ["red apple", "blue car", "blue car", "green leaf",
                                   "green leaf", "yellow banana", "yellow banana"]
    # only the bad answer waits here (backoff 0.25 * 2**0); the 429 (its Retry-After) and the
    # timeout are retried by the openai client itself
    assert sleeps == [0.25]
    assert all(b["response_format"] == {"type": "json_object"} for _, b, _ in srv.requests)
    assert all(b["model"] == "fake-model" and b["temperature"] == 0 for _, b, _ in srv.requests)
    assert '"red apple"' in srv.requests[0][1]["messages"][-1]["content"]
    assert json.loads(out.read_text()) == {"red apple": "round-shape red stem",
                                           "blue car": "wheels doors", "green leaf": "veins green",
                                           "yellow banana": "peel curved"}
    assert s["requests"] == 7 and s["cached_answers"] == 0 and not s["failed"]
    assert s["retries"] == {"bad answer": 1, "rate limit (429)": 1,
                            "timeout or lost connection": 1}
    # 5 answered (not the 429, not the timeout)
    assert s["prompt_tokens"] == 500 and s["completion_tokens"] == 50
    assert sorted(s["short"]) == ["blue car", "green leaf", "yellow banana"]
    assert s["short"]["blue car"]["given"] == 2
    assert json.loads((tmp_path / "attrs.json.summary.json").read_text())["requests"] == 7
    # TCA format: argtca's own loader reads it
    assert load_attributes(str(out), classes, 2)["red apple"] == ["round-shape", "red", "stem"]


def test_cache_second_run_makes_no_request_and_resume(tmp_path):
    classes = ["red apple", "blue car"]
    out = tmp_path / "a.json"
    with FakeChatServer() as srv:
        generate(classes, str(out), _client(srv.url, []), 3, 5, say=lambda m: None)
        first = out.read_text()
        assert len(srv.requests) == 2
        with pytest.raises(GenerationError, match="--resume"):
            generate(classes, str(out), _client(srv.url, []), 3, 5, say=lambda m: None)
        s = generate(classes, str(out), _client(srv.url, []), 3, 5, force=True, say=lambda m: None)
        assert len(srv.requests) == 2 and s["cached_answers"] == 2 and out.read_text() == first
        # --resume keeps the file's classes (even edited ones) and asks only for the new class
        data = json.loads(first)
        data["red apple"] = "edited by hand"
        out.write_text(json.dumps(data))
        s = generate(classes + ["green leaf"], str(out), _client(srv.url, []), 3, 5, resume=True,
                     say=lambda m: None)
        assert srv.classes_asked() == ["red apple", "blue car", "green leaf"]
    got = json.loads(out.read_text())
    assert list(got) == ["red apple", "blue car", "green leaf"]
    assert got["red apple"] == "edited by hand" and got["green leaf"] == "green-part red round"
    cached = list((tmp_path / "cache" / "llm-attributes").glob("*.json"))
    assert len(cached) == 3
    rec = json.loads(cached[0].read_text())
    assert set(rec) == {"model", "prompt_sha256", "class", "answer", "json_mode"}


def test_json_mode_refused_falls_back_to_plain_answers(tmp_path):
    script = {"blue car": [("raw", '```json\n{"attributes": ["Wheels", "doors"]}\n```')]}
    with FakeChatServer(script, json_mode=False) as srv:
        client = _client(srv.url, [])
        generate(["blue car", "red apple"], str(tmp_path / "o.json"), client, 2, 3,
                 say=lambda m: None)
    assert ["response_format" in b for _, b, _ in srv.requests] == [True, False, False]
    assert not client.json_mode
    assert json.loads((tmp_path / "o.json").read_text())["blue car"] == "wheels doors"


def test_a_class_without_usable_answer_is_reported_and_left_out(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_MODEL", "fake-model")
    bad = [("raw", "I cannot help with that.")] * 3
    (tmp_path / "classes.txt").write_text("red_apple\n# comment\n\nblue car\n")
    with FakeChatServer({"blue car": bad}) as srv:
        rc = main(["--classes", str(tmp_path / "classes.txt"), "--out", str(tmp_path / "o.json"),
                   "--base-url", srv.url, "--max-retries", "2", "--backoff", "0", "--no-rank",
                   "--num", "2"])
    assert rc == 1
    assert json.loads((tmp_path / "o.json").read_text()) == {"red apple": "red-part red"}
    out = capsys.readouterr().out
    assert "1 classes got no usable answer ('blue car': bad answer" in out
    assert "gave up after 3 tries" in out and "--resume" in out


def test_key_never_written_or_printed(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_MODEL", "fake-model")
    cls = tmp_path / "classes.txt"
    cls.write_text("red apple\nblue car\n")
    echo = {"error": {"message": f"bad request from key {KEY}", "type": "x"}}
    script = {"blue car": [("status", 429, {"Retry-After": "0"})]}
    with FakeChatServer(script) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
        assert main(["--classes", str(cls), "--out", str(tmp_path / "o.json"), "--num", "3",
                     "--backoff", "0", *TINY_CLIP]) == 0
        assert {a for _, _, a in srv.requests} == {f"Bearer {KEY}"}   # the key was used
        srv.script = {"green leaf": [("status", 400, {}, echo)]}
        cls.write_text("green leaf\n")
        assert main(["--classes", str(cls), "--out", str(tmp_path / "p.json"), "--no-rank",
                     "--api-key", KEY]) == 2
        srv.script = {"green leaf": [("status", 401, {}, echo)]}
        assert main(["--classes", str(cls), "--out", str(tmp_path / "p.json"), "--no-rank"]) == 2
    cap = capsys.readouterr()
    assert "refused the request" in cap.err and "***" in cap.err
    assert "refused the API key" in cap.err
    assert KEY not in cap.out + cap.err
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "classes.txt"]
    assert len(files) >= 4     # o.json, o.json.summary.json, 2 cached answers
    for p in files:
        assert KEY not in p.read_text(errors="replace"), p


def test_missing_openai_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(GenerationError, match=r"pip install 'argtca\[llm\]'"):
        ChatClient(LLMConfig(model="m"))


def test_ranking_matches_a_hand_computed_order(tiny_clip, tmp_path):
    model, tok = tiny_clip
    attrs = ["red", "big-wheels", "leaf", "round-shape", "metal", "striped-fur"]
    ranked = AttributeRanker(model, tok).rank("blue car", attrs)
    with torch.no_grad():   # independently: open_clip's encode_text of the bare texts
        f = F.normalize(model.encode_text(tok(["blue car", "red", "big wheels", "leaf",
                                               "round shape", "metal", "striped fur"])), dim=-1)
    cos = (f[1:] @ f[0]).tolist()
    want = [attrs[i] for i in sorted(range(6), key=lambda i: -cos[i])]
    assert [a for a, _ in ranked] == want
    assert [s for _, s in ranked] == pytest.approx(sorted(cos, reverse=True), abs=1e-5)
    # generate writes the first M of that order
    with FakeChatServer({"blue car": [answer(attrs)]}) as srv:
        generate(["blue car"], str(tmp_path / "o.json"), _client(srv.url, []), 4, 6,
                 ranker=AttributeRanker(model, tok), say=lambda m: None)
    assert json.loads((tmp_path / "o.json").read_text())["blue car"].split() == want[:4]


def test_prompt_has_examples_and_class(tmp_path):
    msgs = build_messages("tabby cat", 30, [(c, list(a)) for c, a in BUILTIN_EXAMPLES],
                          domain="pet photos")
    assert msgs[0]["role"] == "system" and len(msgs) == 2 + 2 * len(BUILTIN_EXAMPLES)
    assert json.loads(msgs[2]["content"])["attributes"][0] == "black-and-white-stripes"
    assert 'List 30 visual attributes of the class "tabby cat" (pet photos)' in msgs[-1]["content"]
    p = tmp_path / "c.txt"
    p.write_text("a\nb\na\n")
    with pytest.raises(GenerationError, match="more than once"):
        read_class_file(str(p))


def test_module_command_dispatches():
    r = subprocess.run([sys.executable, "-m", "argtca.attributes", "frobnicate"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown command 'frobnicate'" in r.stderr
    r = subprocess.run([sys.executable, "-m", "argtca.attributes", "generate", "--help"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--classes" in r.stdout and "--resume" in r.stdout


def test_few_shot_examples_from_cached_tca_files(shared_data, tmp_path, monkeypatch):
    """With the TCA authors' files in the download cache, the examples are read from them (first
    ten after normalisation, the class name dropped); without them, the built-in ones."""
    from argtca.attributes.prompt import few_shot_examples
    monkeypatch.setenv("ARGTCA_DOWNLOADS", str(tmp_path / "dl"))
    assert few_shot_examples()[0] == "built-in"
    (tmp_path / "dl" / "attributes").mkdir(parents=True)
    for f in ("Caltech101_2_V.json", "Food101_2_V.json", "DescribableTextures_2_V.json"):
        src = shared_data / "tca_attributes" / f
        if not src.is_file():
            pytest.skip(f"{f} absent from ../shared/data")
        (tmp_path / "dl" / "attributes" / f).write_bytes(src.read_bytes())
    source, ex = few_shot_examples()
    assert source.startswith("TCA authors' files")
    tca = shared_data / "tca_attributes" / "Caltech101_2_V.json"
    leopard = json.loads(tca.read_text())["leopard"]
    want = [w.lower() for w in leopard.split() if w.lower() != "leopard"][:10]
    assert ex[0] == ("leopard", want)
    assert [c for c, _ in ex] == ["leopard", "apple pie", "striped"]


def test_the_openai_client_retries_transport_failures_and_gives_up_per_class(tmp_path):
    """429 / 5xx: the client's own retries (max_retries per request); when it gives up, the
    class fails with the reason and the run goes on; no wait of ours."""
    five = [("status", 503, {"Retry-After": "0"})] * 3
    script = {"blue car": [("status", 500, {"Retry-After": "0"}), answer(["wheels", "doors"])],
              "green leaf": five}
    sleeps = []
    with FakeChatServer(script) as srv:
        client = _client(srv.url, sleeps, max_retries=2)
        s = generate(["blue car", "green leaf"], str(tmp_path / "o.json"), client, 2, 3,
                     say=lambda m: None)
    assert srv.classes_asked() == ["blue car"] * 2 + ["green leaf"] * 3
    assert sleeps == [] and s["requests"] == 5
    assert s["retries"] == {"server error": 3}
    assert s["failed"] == {"green leaf": "server error (HTTP 503); the openai client gave up "
                                         "after 3 tries"}
    assert client.client.max_retries == 2


def test_a_key_reflected_in_answers_never_reaches_a_file(tmp_path, capsys, monkeypatch):
    """A server (or proxy) that echoes the key inside its answers: plain, upper-cased, or as
    JSON escapes. Neither the cache, the attribute file nor the summary holds it."""
    monkeypatch.setenv("OPENAI_MODEL", "fake-model")
    script = {"red apple": [("reflect", {"attributes": ["round", "$KEY", "key $KEY here"]})],
              "blue car": [("reflect", {"attributes": ["wheels", "$KEY"]}, "upper")],
              "green leaf": [("reflect", {"attributes": ["veins", "$KEY", "green"]}, "escaped")],
              "grey cloud": [("reflect", {"attrs": "$KEY"})] * 2}
    cls = tmp_path / "classes.txt"
    cls.write_text("red apple\nblue car\ngreen leaf\ngrey cloud\n")
    with FakeChatServer(script) as srv:
        rc = main(["--classes", str(cls), "--out", str(tmp_path / "o.json"), "--num", "1",
                   "--base-url", srv.url, "--api-key", KEY, "--no-rank", "--backoff", "0",
                   "--max-retries", "1"])
    assert rc == 1                                      # grey cloud: no usable answer
    assert {a for _, _, a in srv.requests} == {f"Bearer {KEY}"}
    got = json.loads((tmp_path / "o.json").read_text())
    assert got == {"red apple": "round", "blue car": "wheels", "green leaf": "veins"}
    cached = sorted((tmp_path / "cache" / "llm-attributes").glob("*.json"))
    assert len(cached) == 3
    texts = [p.read_text() for p in tmp_path.rglob("*") if p.is_file() and p.name != cls.name]
    assert len(texts) == 5                              # 3 cached answers, o.json, its summary
    secret_forms = (KEY, KEY.lower(), KEY.upper(), "\\u0073\\u006b\\u002d")
    for t in texts:
        assert not any(f.lower() in t.lower() for f in secret_forms), t
    assert any("***" in t for t in texts)
    red = next(json.loads(t) for t in texts if '"class": "red apple"' in t)
    assert red["answer"] == json.dumps({"attributes": ["round", "***", "key *** here"]})
    cap = capsys.readouterr()
    assert KEY.lower() not in (cap.out + cap.err).lower()
    # a cache file written before (by an older argtca, with the key in it) is read redacted
    rec = json.loads(cached[0].read_text())
    rec["answer"] = json.dumps({"attributes": ["tall", KEY]})
    cached[0].write_text(json.dumps(rec))
    with FakeChatServer() as srv:
        raw, attrs, hit = _client(srv.url, []).ask([], rec["class"], rec["prompt_sha256"])
    assert hit and KEY not in raw and attrs == ["tall", "***"]
