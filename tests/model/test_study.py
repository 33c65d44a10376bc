"""``swarmfab model``'s stages on a tiny dense decoder (random weights, made here): the
profile, a part extracted as a problem file the verifier accepts with the original
module as candidate, the crowned part assembled and running inside the model, and a
part wrong only inside the model caught by the end-to-end check."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from swarmfab.cli import app
from swarmfab.model import (
    Options,
    Patched,
    check_end_to_end,
    extract_part,
    find_parts,
    load_target,
    phases_of,
    profile_phase,
    study,
)
from swarmfab.model.assemble import time_side_by_side
from swarmfab.model.study import BF16_TOLERANCES, DEFAULT_TOLERANCES
from swarmfab.records import Candidate
from swarmfab.report.model_report import write_model_report

transformers = pytest.importorskip("transformers")

# a ModelNew as an agent writes one: the MLP's arithmetic spelt out
FUSED_MLP = '''

class ModelNew(Model):
    def forward(self, x0):
        p = self.part
        return p.down_proj(torch.nn.functional.silu(p.gate_proj(x0)) * p.up_proj(x0))
'''
# right on every shape a problem file's cases draw (8 tokens and more), wrong one token
# at a time: decode inside the model
WRONG_AT_ONE_TOKEN = '''

class ModelNew(Model):
    def forward(self, *inputs):
        out = super().forward(*inputs)
        return out * 1.5 if inputs[0].shape[1] == 1 else out
'''
# the MLP computed in bfloat16: a reduced-precision part
BF16_MLP = '''

class ModelNew(Model):
    def forward(self, *inputs):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return super().forward(*inputs).float()
'''
# a champion that cannot run inside the model at all
RAISES = '''

class ModelNew(Model):
    def forward(self, *inputs):
        raise RuntimeError("not inside a model")
'''
FACTORY = '''
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(64, 256)
        self.down = torch.nn.Linear(256, 64)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


def make():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.LayerNorm(64), Block())
    return model, (torch.randn(4, 32, 64),)
'''


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    directory = tmp_path_factory.mktemp("llama")
    transformers.LlamaForCausalLM(config).save_pretrained(directory)
    return directory


def _extracted(target: Any, directory: Path, class_name: str = "LlamaMLP"
               ) -> tuple[Path, list[tuple[str, torch.nn.Module]]]:
    """A part's problem file (prefill's call), written in ``directory``, and the part's
    instances."""
    [phase, _] = phases_of(target, tokens=32, batch=1, new_tokens=4)
    profile = profile_phase(target.module, phase, repeats=1)
    part = next(p for p in profile.parts if p.class_name == class_name)
    instances = find_parts(target.module)[part.key]
    problem = extract_part(part, instances[0][1], target.module.config, directory, 1, "t").path
    assert problem is not None
    return problem, instances


def _patched(target: Any, problem: Path, new: str,
             instances: list[tuple[str, torch.nn.Module]]) -> Patched:
    """The model with the problem's ModelNew (``new``) in every instance's place."""
    patched = Patched(target.module)
    patched.add(_champion(problem, new), instances)
    return patched


def test_the_profile_names_each_part_its_calls_and_share(llama: Path) -> None:
    target = load_target(str(llama))
    prefill, decode = (profile_phase(target.module, phase, repeats=2)
                       for phase in phases_of(target, tokens=32, batch=2, new_tokens=4))
    parts = {part.class_name: part for part in prefill.parts}
    assert {"LlamaMLP", "LlamaAttention", "LlamaRMSNorm", "Linear", "Embedding"} <= set(parts)
    assert len(parts["LlamaMLP"].paths) == 2 and parts["LlamaMLP"].calls == 2
    assert len(parts["LlamaRMSNorm"].paths) == 5  # two per layer and the final one
    assert parts["LlamaMLP"].args[0].shape == (1, 32, 64)
    assert 0.3 < prefill.covered <= 1.05 and prefill.seconds > 0
    assert prefill.operators and prefill.operators[0].name.startswith("aten::")
    # decode: 4 tokens, the first step the whole prompt, for each of 2 layers
    mlp = next(part for part in decode.parts if part.class_name == "LlamaMLP")
    assert mlp.calls == 2 * 4 and mlp.args[0].shape == (2, 16, 64)


def test_a_run_interrupted_between_parts_moves_no_share() -> None:
    """A short phase that the scheduler interrupts loses a time slice inside a part or
    between parts; the shares come from the fastest run, the undisturbed one."""
    from swarmfab.model.target import Phase

    class Slow(torch.nn.Module):  # a part of 2 ms
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            time.sleep(0.002)
            return self.linear(x)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.ModuleDict({"slow": Slow()})])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layers[0]["slow"](x)

    runs = []

    def call(model: torch.nn.Module) -> None:
        runs.append(1)
        if len(runs) == 3:  # the first timed run: a time slice lost between the parts
            time.sleep(0.05)
        model(torch.randn(4, 64))

    profile = profile_phase(Model(), Phase("prefill", "prefill", call), repeats=2)
    assert len(runs) >= 4  # a phase of milliseconds runs more than twice
    [slow] = profile.parts
    assert slow.class_name == "Slow" and slow.calls == 1 and slow.seconds >= 0.002
    assert profile.covered > 0.5, profile.covered  # 0.14 with the interrupted run counted


def test_extracted_parts_are_problems_the_verifier_accepts_with_the_original(
        llama: Path, tmp_path: Path) -> None:
    target = load_target(str(llama))
    [phase, _] = phases_of(target, tokens=32, batch=1, new_tokens=4)
    profile = profile_phase(target.module, phase, repeats=1)
    instances = find_parts(target.module)
    written = {}
    for number, name in enumerate(("LlamaMLP", "LlamaRMSNorm", "LlamaAttention"), 1):
        part = next(p for p in profile.parts if p.class_name == name)
        extraction = extract_part(part, instances[part.key][0][1], target.module.config,
                                  tmp_path, number, target.description)
        assert extraction.path is not None, extraction.reason
        written[name] = extraction.path
    mlp = written["LlamaMLP"].read_text()
    assert "LlamaMLP(config=CONFIG)" in mlp and "x0_dim1 = 32" in mlp  # tokens vary
    assert "torch.randn(1, x0_dim1, 64" in mlp  # the hidden size is the weights'
    # LlamaRMSNorm keeps no hidden_size to be rebuilt from: saved whole, in the file
    assert "base64.b64decode(SAVED)" in written["LlamaRMSNorm"].read_text()
    # attention: called with keywords, the rotary tables a tuple, one token axis for all
    attention = written["LlamaAttention"].read_text()
    assert "position_embeddings=(position_embeddings_0, position_embeddings_1)" in attention
    assert "hidden_states_dim1 = 32" in attention and "position_ids_dim1" not in attention
    assert "return result[0]" in attention  # (output, None): the tensor alone
    # decode's first call carries a cache object: not replayable from shapes
    [_, decode] = phases_of(target, tokens=32, batch=1, new_tokens=4)
    stepping = next(p for p in profile_phase(target.module, decode, repeats=1).parts
                    if p.class_name == "LlamaAttention")
    refused = extract_part(stepping, instances[stepping.key][0][1], target.module.config,
                           tmp_path, 4, target.description)
    assert refused.path is None and "not replayable" in refused.reason, refused.reason

    for name, problem in written.items():
        candidate = tmp_path / f"{name}_candidate.py"
        candidate.write_text(problem.read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
        done = CliRunner().invoke(app, [
            "verify", str(problem), str(candidate), "--fast", "--json", "--threads", "1",
            "--db", str(tmp_path / "x.db"), "--workdir", str(tmp_path / "work")])
        verdict = json.loads(done.stdout)
        assert verdict["status"] == "accepted", (name, verdict["reason"])


def _champion(problem: Path, new: str) -> str:
    return problem.read_text() + new


def test_a_crowned_part_runs_inside_the_model_and_the_model_checks(
        llama: Path, tmp_path: Path) -> None:
    target = load_target(str(llama))
    problem, instances = _extracted(target, tmp_path)
    patched = _patched(target, problem, FUSED_MLP, instances)
    assert len(patched) == 2
    check = check_end_to_end(target, patched, DEFAULT_TOLERANCES)
    assert check.passed and check.tokens_match, check.detail
    assert patched.calls() > 0  # the champions ran, and the model is back as it was
    assert type(target.module.model.layers[0].mlp).__name__ == "LlamaMLP"
    [prefill, _] = phases_of(target, tokens=32, batch=1, new_tokens=4)
    timing = time_side_by_side(target.module, prefill, patched, rounds=3)
    assert timing.rounds == 3 and timing.speedup.low <= timing.speedup.median


def test_a_part_in_bfloat16_is_judged_on_logits_and_a_wrong_step_still_fails(
        llama: Path, tmp_path: Path) -> None:
    target = load_target(str(llama))
    problem, instances = _extracted(target, tmp_path)
    reduced = _patched(target, problem, BF16_MLP, instances)
    strict = check_end_to_end(target, reduced, DEFAULT_TOLERANCES)
    assert not strict.passed and strict.rms_ratio > DEFAULT_TOLERANCES.rms_ratio
    check = check_end_to_end(target, reduced, BF16_TOLERANCES, same_tokens_required=False)
    assert check.passed, check.detail
    assert "not required: parts in reduced precision are judged on logits" in check.detail
    assert Options(precision="bfloat16").limits == BF16_TOLERANCES
    assert Options().limits == DEFAULT_TOLERANCES
    # the decode steps' logits are still compared, up to the first token that differs
    wrong = _patched(target, problem, WRONG_AT_ONE_TOKEN, instances)
    caught = check_end_to_end(target, wrong, BF16_TOLERANCES, same_tokens_required=False)
    assert not caught.passed and caught.rms_ratio > BF16_TOLERANCES.rms_ratio, caught.detail


def test_bfloat16_is_refused_by_name_where_the_cpu_lacks_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(FACTORY)
    studying = sys.modules[Options.__module__]  # swarmfab.model.study (the package's
    monkeypatch.setattr(studying, "host_cpu_flags", lambda: frozenset({"avx2"}))  # study)
    done = CliRunner().invoke(app, ["model", f"{tmp_path / 'net.py'}:make",
                                    "--precision", "bfloat16", "--out", str(tmp_path / "o")])
    assert done.exit_code == 2 and "no bfloat16 instructions" in done.output, done.output
    done = CliRunner().invoke(app, ["model", f"{tmp_path / 'net.py'}:make",
                                    "--precision", "float16", "--out", str(tmp_path / "o")])
    assert done.exit_code == 2 and "one of float32, bfloat16" in done.output, done.output


def test_a_part_wrong_only_inside_the_model_is_dropped_by_the_end_to_end_check(
        llama: Path, tmp_path: Path) -> None:
    target = load_target(str(llama))
    crowned = []

    class Factory:  # what a run would crown: right on the problem, wrong in the model
        def optimise(self, part: Any, seconds: float) -> Any:
            problem = Path(part.problem)
            source = _champion(problem, WRONG_AT_ONE_TOKEN if part.class_name == "LlamaMLP"
                               else RAISES)
            crowned.append(problem.name)
            return SimpleNamespace(run_id=f"run-{len(crowned)}", champion=Candidate(
                problem.stem, "torch-module", {"model_new.py": source}, "model_new.py"))

        def operator(self, part: Any, champion: Candidate) -> Any:
            raise AssertionError("a dense decoder has no workload part")

    options = Options(budget_s=3600, tokens=32, new_tokens=4, coverage=1.0, rounds=3)
    result = study(target, options, tmp_path / "parts", Factory(), lambda line: None,
                   time.monotonic())
    tried = [p for p in result.parts if p.run_id]
    assert "LlamaMLP" in {p.class_name for p in tried}
    assert sorted(crowned) == sorted(Path(p.problem or "").name for p in tried)
    for part in tried:  # every one is dropped, and named with the reason
        assert not part.patched, part.class_name
        assert part.note.startswith("dropped: the model with it fails the end-to-end check"
                                    if part.class_name == "LlamaMLP" else
                                    "dropped: the model with it raises RuntimeError"), part.note
    assert result.notes == ["every crowned part failed the end-to-end check"]
    assert not result.timings


def test_model_profiles_a_factory_module_and_says_what_it_extracted(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(textwrap.dedent(FACTORY))
    done = CliRunner().invoke(app, [
        "model", f"{tmp_path / 'net.py'}:make", "--profile-only", "--json", "--threads", "1",
        "--out", str(tmp_path / "parts"), "--db", str(tmp_path / "x.db")])
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    [profile] = result["profiles"]
    assert profile["phase"] == "forward"
    names = {part["class_name"] for part in result["parts"]}
    assert names == {"LayerNorm", "Block"}
    block = next(part for part in result["parts"] if part["class_name"] == "Block")
    # the target file's own class, imported from its directory and built again
    source = Path(block["problem"]).read_text()
    assert "from net import Block" in source and "self.part = Block()" in source
    assert (tmp_path / "parts" / "study.json").is_file()

    bad = CliRunner().invoke(app, ["model", str(tmp_path / "net.py"), "--profile-only"])
    assert bad.exit_code != 0 and "module.py:factory" in bad.output


def test_a_crowned_part_is_patched_timed_and_its_amdahl_share_predicted(
        llama: Path, tmp_path: Path) -> None:
    target = load_target(str(llama))
    table = SimpleNamespace(reference="champion", ratio_to_reference={
        "champion": SimpleNamespace(median=1.0, low=1.0, high=1.0),
        "torch-eager": SimpleNamespace(median=2.0, low=1.9, high=2.1)})

    # an attention champion crowned over its run's starting point, slower than eager
    slower = SimpleNamespace(reference="champion", ratio_to_reference={
        "champion": SimpleNamespace(median=1.0, low=1.0, high=1.0),
        "torch-eager": SimpleNamespace(median=0.96, low=0.94, high=0.99)})
    as_is = "\n\nclass ModelNew(Model):\n    pass\n"

    class Factory:  # crowns the spelt-out MLP, 2x faster than eager in its own run
        def optimise(self, part: Any, seconds: float) -> Any:
            assert seconds >= 60
            problem = Path(part.problem or "")
            if part.class_name == "LlamaAttention":
                return SimpleNamespace(run_id="attention", final=[slower], champion=Candidate(
                    problem.stem, "torch-module", {"model_new.py": _champion(problem, as_is)},
                    "model_new.py"))
            if part.class_name != "LlamaMLP":
                return SimpleNamespace(run_id="nothing", champion=None, final=[])
            return SimpleNamespace(run_id="mlp", final=[table], champion=Candidate(
                problem.stem, "torch-module", {"model_new.py": _champion(problem, FUSED_MLP)},
                "model_new.py"))

        def operator(self, part: Any, champion: Candidate) -> Any:
            raise AssertionError("a dense decoder has no workload part")

    options = Options(budget_s=3600, tokens=32, new_tokens=4, coverage=1.0, rounds=3)
    result = study(target, options, tmp_path / "parts", Factory(), lambda line: None,
                   time.monotonic())
    [mlp] = [part for part in result.parts if part.class_name == "LlamaMLP"]
    assert mlp.patched and mlp.speedups == [2.0] and mlp.run_id == "mlp"
    [attention] = [part for part in result.parts if part.class_name == "LlamaAttention"]
    assert not attention.patched and attention.champion and attention.speedups == [0.96]
    assert attention.note.startswith("not patched: its champion ran 0.96x the model's own")
    assert result.end_to_end is not None and result.end_to_end.passed
    assert [timing.phase for timing in result.timings] == ["prefill", "decode"]
    assert result.champion_calls > 0
    # prefill: 1 / (1 - s/2), the MLP's share at twice the speed; its run timed no
    # decode step, so decode is predicted unchanged
    share = sum(p.share for p in result.profiles[0].parts if p.class_name == "LlamaMLP")
    assert result.predicted == {"prefill": pytest.approx(1 / (1 - share / 2)), "decode": 1.0}
    assert set(result.stages) == {"profile", "extract", "optimise", "assemble, check, time"}
    # profiled again, patched: the swapped MLPs are where the MLPs were
    assert [profile.phase for profile in result.after] == ["prefill", "decode"]
    assert "Crowned" in {part.class_name for part in result.after[0].parts}
    # the answer as a page: the figures, the parts, the chart of where the time goes
    page = write_model_report(json.loads(json.dumps(result.to_dict(), default=str)),
                              tmp_path / "report.html").read_text()
    assert "<svg" in page and "LlamaMLP" in page and "patched into the model" in page
    speedup = result.timings[0].speedup
    assert f"{speedup.median:.2f}x [{speedup.low:.2f}, {speedup.high:.2f}]" in page
    # written out: apply(model) on a freshly loaded model puts the same parts in place
    applying = Path(result.exported)
    assert applying.name == "apply.py" and (applying.parent / "parts.json").is_file()
    spec = importlib.util.spec_from_file_location("patched_parts", applying)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fresh = load_target(str(llama)).module
    ids = torch.randint(3, 128, (1, 20))
    with torch.no_grad():
        expected = fresh(input_ids=ids).logits
        patched = module.apply(fresh)
        got = fresh(input_ids=ids).logits
    assert patched.calls() == 2 and torch.allclose(got, expected, rtol=1e-4, atol=1e-5)
    patched.__exit__(None, None, None)
    assert type(fresh.model.layers[0].mlp).__name__ == "LlamaMLP"


def test_a_part_called_with_keywords_runs_where_the_call_has_its_form(
        llama: Path, tmp_path: Path) -> None:
    """The attention champion takes prefill's calls; decode's (with a cache) go to the
    original, and the model stays right."""
    target = load_target(str(llama))
    problem, instances = _extracted(target, tmp_path, "LlamaAttention")
    patched = _patched(target, problem, "\n\nclass ModelNew(Model):\n    pass\n", instances)
    check = check_end_to_end(target, patched, DEFAULT_TOLERANCES)
    assert check.passed, check.detail
    assert patched.calls() > 0 and patched.fallbacks() > 0
