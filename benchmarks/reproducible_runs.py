"""Same seed, same bytes: every batch verb run twice with the default decoding, and once
killed after its first output then resumed, must write byte-identical media.

    PYTHONPATH=. python benchmarks/reproducible_runs.py              # every verb, ~5 min
    PYTHONPATH=. python benchmarks/reproducible_runs.py --verbs batch mesh

Each verb runs as a user runs it (`python -m mmspec.commands.cli ...`, the shipped model,
the default decoding `auto` on its measured cost curve) in a fresh process per run, with
4 items. The killed run is stopped with SIGKILL as soon as its first media file exists,
then started again with the same command. Compared: every media file of the run (images,
videos, meshes, audio) and, for captions, the caption texts of the records (sampled
captions, --sample). Writes benchmarks/results/reproducible_runs.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mmspec.runs.bench import dated_environment, write_results

MEDIA = (".png", ".gif", ".mp4", ".glb", ".obj", ".wav")


def verbs(work: Path) -> dict:
    """Per verb: (argv after `mmspec`, without the output folder flag; that flag)."""
    (work / "labels.txt").write_text("0\n3\n5\n7\n")
    (work / "videos.txt").write_text("0\n1\n2\n3\n")
    (work / "meshes.txt").write_text("0\n1\n2\n3\n")
    (work / "words.txt").write_text("seven\none\nfour\nnine\n")
    images = work / "images"
    images.mkdir(exist_ok=True)
    from mmspec.datasets.shape_captions import load_scenes
    from mmspec.io.images import to_pil

    for i, image in enumerate(to_pil(load_scenes("heldout", 4)[0])):
        image.save(images / f"scene{i}.png")
    return {
        "batch": (["batch", "--prompts", str(work / "labels.txt"), "--seed", "3"], "--out"),
        "video": (["video", "--batch", str(work / "videos.txt"), "--seed", "3", "--format", "gif"], "--out"),
        "mesh": (["mesh", "--items", str(work / "meshes.txt"), "--seed", "3"], "--out-dir"),
        "speak": (["speak", "--prompts", str(work / "words.txt"), "--seed", "3"], "--out-dir"),
        "caption": (["caption", str(images), "--sample", "--batch-size", "3", "--seed", "3"], "--out"),
    }


def run(argv: list[str], out: Path, kill_after_first: bool = False) -> float:
    """One run of the CLI into `out`; with `kill_after_first`, SIGKILL once a first output exists."""
    command = [sys.executable, "-m", "mmspec.commands.cli", *argv]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while kill_after_first and process.poll() is None:
        if outputs(out):
            process.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    _, err = process.communicate()
    if process.returncode != 0 and not kill_after_first:
        raise SystemExit(f"{' '.join(command)} failed: {err.strip().splitlines()[-1] if err.strip() else process.returncode}")
    return time.perf_counter() - started


def outputs(out: Path) -> dict[str, bytes]:
    """What a run wrote that must repeat: its media files, and its records' captions."""
    found = {}
    for path in sorted(out.rglob("*")) if out.exists() else []:
        if path.suffix in MEDIA:
            found[str(path.relative_to(out))] = path.read_bytes()
        elif path.parent.name == "records" and path.suffix == ".json":
            caption = json.loads(path.read_text()).get("caption")
            if caption is not None:
                found[str(path.relative_to(out))] = caption.encode()
    return found


def check_verb(argv: list[str], flag: str, work: Path) -> dict:
    runs = {name: work / name for name in ("first", "second", "killed")}
    seconds = {name: run([*argv, flag, str(path)], path) for name, path in runs.items() if name != "killed"}
    run([*argv, flag, str(runs["killed"])], runs["killed"], kill_after_first=True)
    partial = len(outputs(runs["killed"]))
    seconds["resumed"] = run([*argv, flag, str(runs["killed"])], runs["killed"])
    first = outputs(runs["first"])
    return {"files": len(first), "written_before_the_kill": partial,
            "second_identical": outputs(runs["second"]) == first, "resumed_identical": outputs(runs["killed"]) == first,
            "seconds": seconds}


def markdown(results: dict, meta: dict) -> str:
    lines = [f"# Same seed, same bytes ({meta['date']}, commit {meta['commit']})", "",
             "Every verb with the default decoding (auto, on its measured cost curve), 4 items, a fresh process "
             f"per run, on {meta['device']}. 'killed' is SIGKILL once a first output exists, then the same command again.", "",
             "| verb | files compared | second run identical | written before the kill | resumed run identical |",
             "|---|---|---|---|---|"]
    for verb, r in results.items():
        lines.append(f"| {verb} | {r['files']} | {'yes' if r['second_identical'] else 'NO'} | {r['written_before_the_kill']} | "
                     f"{'yes' if r['resumed_identical'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbs", nargs="+", default=["batch", "video", "mesh", "speak", "caption"])
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mmspec-reproducible-"))
    os.environ["MMSPEC_CACHE_DIR"] = str(work / "cache")  # auto measures its curves in this run
    commands = verbs(work)
    results = {}
    for verb in args.verbs:
        argv, flag = commands[verb]
        results[verb] = check_verb(argv, flag, work / verb)
        print(verb, json.dumps({k: v for k, v in results[verb].items() if k != "seconds"}), flush=True)
    shutil.rmtree(work, ignore_errors=True)
    write_results(args.out, "reproducible_runs", markdown(results, dated_environment()), {"results": results})


if __name__ == "__main__":
    main()
