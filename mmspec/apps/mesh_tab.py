"""The demo's Meshes tab: one class and seed decoded by AR and by an accelerated method,
side by side in 3-D viewers (`gr.Model3D`), with forwards and time.

Its endpoint is `/generate_mesh(mesh_class, method, seed, temperature)`.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import gradio as gr
import torch

from mmspec.apps.fields import seed_field, whole
from mmspec.apps.shipped import load_shipped
from mmspec.apps.token_match import same_tokens_line
from mmspec.runs.batch import MAX_SEED
from mmspec.runs.placement import describe_placement
from mmspec.io.mesh import is_valid, save_mesh
from mmspec.pipelines.mesh import MESH_ASSETS, MeshPipeline, mesh_decoding

MESH_METHODS = ["auto", "mc-sjd+lookup", "mc-sjd+face-lookup", "lookup", "mc-sjd", "sjd"]
TABLE_HEADERS = ["method", "forwards", "time (s)", "faces", "valid", "x fewer forwards", "x faster", "same tokens as AR"]


def compare_meshes(pipe: MeshPipeline, mesh_class: str, method: str, seed: int, temperature: float, out_dir: Path):
    """AR and `method` from one seed: two .glb paths, a table row each and the line saying
    whether `method` gave AR's very tokens."""
    mesh_decoding(method)  # a one-line error before any work
    rows, paths, tokens = [], [], []
    for name in ("ar", method):
        started = time.perf_counter()
        out = pipe(class_labels=mesh_class, decoding=name, temperature=temperature, generator=torch.Generator().manual_seed(seed))
        seconds = time.perf_counter() - started
        mesh = out.meshes[0]
        tokens.append(out.tokens)
        paths.append(str(save_mesh(mesh, out_dir / f"{name}_{mesh_class}_{seed}.glb")))
        rows.append([name, out.stats[0].forward_passes, round(seconds, 2), len(mesh.faces), "yes" if is_valid(mesh) else "no"])
    for row, row_tokens in zip(rows, tokens):
        row += [round(rows[0][1] / row[1], 2), round(rows[0][2] / max(row[2], 1e-9), 2),
                "yes" if torch.equal(row_tokens, tokens[0]) else "no"]
    return paths, rows, same_tokens_line(tokens[0], [(method, tokens[1])])


def build_mesh_tab(pipe: MeshPipeline | None = None, device: torch.device | str = "cpu",
                   dtype: torch.dtype = torch.float32) -> None:
    """Lays out the tab inside the current `gr.Tab`; loads the shipped mesh model (on `device`,
    in `dtype`) unless given one."""
    pipe = pipe or load_shipped(MESH_ASSETS, device, dtype)
    pipe.set_progress_bar_config(disable=True)
    out_dir = Path(tempfile.mkdtemp(prefix="mmspec-meshes-"))
    gr.Markdown("The same class and seed decoded by AR and by an accelerated method: auto returns AR's very mesh, "
                "token for token, in fewer forward passes; SJD and MC-SJD sample the same distribution.")
    with gr.Row():
        mesh_class = gr.Dropdown(pipe.class_names, value=pipe.class_names[0], label="class")
        method = gr.Dropdown(MESH_METHODS, value=MESH_METHODS[0], label="accelerated method")
        seed = seed_field()
        temperature = gr.Slider(0.0, 2.0, value=pipe.default_sampling["temperature"], step=0.05, label="temperature")
    run = gr.Button("Generate", variant="primary")
    with gr.Row():
        ar_view = gr.Model3D(label="AR", elem_id="mesh-ar")
        fast_view = gr.Model3D(label="accelerated", elem_id="mesh-fast")
    table = gr.Dataframe(headers=TABLE_HEADERS, label="cost", elem_id="mesh-stats")
    status = gr.Markdown(label="status")

    def generate_mesh(mesh_class, method, seed, temperature):
        """AR and the chosen method from one seed: two meshes (.glb), a cost table and a status line."""
        try:
            seed = whole("seed", seed, 0, MAX_SEED)
            paths, rows, same = compare_meshes(pipe, mesh_class, method, seed, float(temperature), out_dir)
        except ValueError as err:
            return None, None, [], f"**Cannot generate:** {err}"
        return paths[0], paths[1], rows, f"Done: AR and {method} from seed {seed}, {describe_placement(pipe)}. {same}"

    run.click(generate_mesh, [mesh_class, method, seed, temperature], [ar_view, fast_view, table, status],
              api_name="generate_mesh")
