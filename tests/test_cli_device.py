"""`--device` and `--dtype` on every verb (`mmspec.commands.common`): each verb takes both,
a device this machine lacks or an unknown one is one line with status 2 before any work,
and the resolved device and dtype are recorded, the dtype as a setting a resumed run keeps."""

import json

import pytest
import torch

from mmspec.commands.cli import VERBS, build_parser, main
from mmspec.commands.common import UserError, resolve_device, resolve_dtype
from tests.helpers.pipelines import tiny_c2i_pipeline

# the fewest arguments each verb parses with (the verbs' required ones)
VERB_ARGS = {
    "generate": [],
    "bench": [],
    "batch": ["--prompts", "labels.txt", "--out", "out"],
    "caption": ["a.png"],
    "mesh": [],
    "speak": ["seven"],
    "video": [],
    "demo": [],
    "train-drafter": ["--out", "head"],
}


def test_every_verb_is_listed():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == set(VERB_ARGS) and len(VERBS) == len(VERB_ARGS)


@pytest.mark.parametrize("verb", VERB_ARGS)
def test_every_verb_takes_device_and_dtype_with_auto_by_default(verb):
    parser = build_parser()
    args = parser.parse_args([verb, *VERB_ARGS[verb]])
    assert (args.device, args.dtype) == ("auto", "auto")
    args = parser.parse_args([verb, *VERB_ARGS[verb], "--device", "cuda:1", "--dtype", "float32"])
    assert (args.device, args.dtype) == ("cuda:1", "float32")


@pytest.fixture
def no_gpu(monkeypatch, tmp_path):
    """A machine where torch sees no CUDA GPU (this one, or a GPU machine made to look so),
    whose pipelines must not load: every refusal comes before any work."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def no_loading(*args, **kwargs):
        raise AssertionError("a pipeline was loaded")

    monkeypatch.setattr("mmspec.pipelines.load_pipeline", no_loading)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def one_line_error(code: int, err: str) -> str:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.mark.parametrize("verb", VERB_ARGS)
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_a_cuda_device_without_a_gpu_is_refused_in_one_line_before_any_work(no_gpu, capsys, verb, device):
    err = one_line_error(main([verb, *VERB_ARGS[verb], "--device", device]), capsys.readouterr().err)
    assert err.startswith(f"mmspec {verb}: error: --device {device}: torch sees no CUDA GPU") and "--device cpu" in err
    assert not list(no_gpu.iterdir())  # nothing written


@pytest.mark.parametrize("device", ["tpu", "gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cuda0", " cpu", "mps"])
def test_an_unknown_device_is_refused_in_one_line(no_gpu, capsys, device):
    err = one_line_error(main(["generate", "--device", device]), capsys.readouterr().err)
    assert err == f"mmspec generate: error: argument --device: must be auto, cpu, cuda or cuda:N (N a GPU's index), got {device!r}"


@pytest.mark.parametrize("verb, dtype", [("generate", "float64"), ("caption", "half"), ("train-drafter", "bfloat16")])
def test_a_dtype_the_verb_does_not_take_is_refused_in_one_line(no_gpu, capsys, verb, dtype):
    """train-drafter trains the head in float32 beside the model: a bfloat16 model mixed dtypes in one matmul."""
    err = one_line_error(main([verb, *VERB_ARGS[verb], "--dtype", dtype]), capsys.readouterr().err)
    assert f"argument --dtype: invalid choice: '{dtype}'" in err


def test_a_dtype_the_pipeline_refuses_is_one_line_before_any_work(tmp_path, capsys, monkeypatch):
    """The dtype reaches the pipeline's loader, whose refusal (a ValueError, as
    `from_pretrained` refuses a dtype that is not floating) is the verb's one line."""
    asked = []

    def refuse(path, torch_dtype=None):
        asked.append(torch_dtype)
        raise ValueError(f"this pipeline does not run in {torch_dtype}")

    monkeypatch.setattr("mmspec.pipelines.load_pipeline", refuse)
    code = main(["generate", "--device", "cpu", "--dtype", "float16", "--out", str(tmp_path / "grid.png")])
    assert one_line_error(code, capsys.readouterr().err) == "mmspec generate: error: this pipeline does not run in torch.float16"
    assert asked == [torch.float16] and not list(tmp_path.iterdir())


def test_a_gpu_index_past_the_count_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(UserError, match=r"--device cuda:2: this machine has 2 CUDA GPU\(s\), cuda:0 to cuda:1"):
        resolve_device("cuda:2")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)


def test_auto_is_the_current_gpu_when_torch_sees_one_else_the_cpu(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert resolve_device("auto") == resolve_device("cuda") == torch.device("cuda", 0)


def test_under_accelerate_auto_and_cuda_are_the_process_s_gpu_and_cpu_still_wins(monkeypatch):
    """`mmspec batch` under `accelerate launch`: process k decodes on the GPU PartialState gives it."""
    import accelerate

    class Process:  # what PartialState says in process 1 of 2
        device = torch.device("cuda", 1)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(accelerate, "PartialState", Process)
    assert resolve_device("auto", per_process=True) == resolve_device("cuda", per_process=True) == torch.device("cuda", 1)
    assert resolve_device("cuda:0", per_process=True) == torch.device("cuda", 0)
    assert resolve_device("cpu", per_process=True) == torch.device("cpu")


@pytest.mark.parametrize("major, expected", [(8, torch.bfloat16), (7, torch.float32)])
def test_auto_dtype_is_bfloat16_on_a_gpu_that_computes_in_it(monkeypatch, major, expected):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (major, 0))
    monkeypatch.setattr(torch.version, "hip", None)
    cuda = torch.device("cuda", 0)
    assert resolve_dtype("auto", cuda) == expected
    assert resolve_dtype("auto", cuda, ("float32",)) == torch.float32  # train-drafter's
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("float16", torch.device("cpu")) == torch.float16


def test_batch_records_device_and_dtype_and_a_resume_in_another_dtype_is_refused(tmp_path, capsys):
    tiny_c2i_pipeline().save_pretrained(tmp_path / "pipe")
    (tmp_path / "labels.txt").write_text("0\n")
    out = tmp_path / "out"
    run = ["batch", "--pipeline", str(tmp_path / "pipe"), "--prompts", str(tmp_path / "labels.txt"), "--out", str(out),
           "--decoding", "ar", "--device", "cpu"]
    assert main([*run, "--dtype", "bfloat16"]) == 0
    assert "wrote 1 items (0 already done) on cpu in bfloat16" in capsys.readouterr().out
    recorded = json.loads((out / "run.json").read_text())
    assert recorded["settings"]["dtype"] == "bfloat16" and recorded["device"] == "cpu"
    record = json.loads((out / "records" / "000001.json").read_text())
    assert (record["device"], record["dtype"]) == ("cpu", "bfloat16")

    err = one_line_error(main([*run, "--dtype", "float32"]), capsys.readouterr().err)
    assert "holds a run with other dtype settings" in err and "--restart" in err
    assert main([*run, "--dtype", "bfloat16"]) == 0  # the same dtype resumes
    assert "wrote 0 items (1 already done)" in capsys.readouterr().out
    assert main([*run, "--dtype", "float32", "--restart"]) == 0
    assert json.loads((out / "run.json").read_text())["settings"]["dtype"] == "float32"
