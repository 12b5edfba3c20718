"""The leaf of mmspec: the contracts between the engine and a model (layouts, sessions),
the sampling transform and the acceptance rules. Nothing here imports the rest of mmspec;
`decoding`, `kernels` and `models` import it."""
