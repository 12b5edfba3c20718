"""Front ends over the pipelines: `demo`, the Gradio app behind `mmspec demo` (needs the
`[demo]` extra). Importing this package imports no front end's dependencies."""
