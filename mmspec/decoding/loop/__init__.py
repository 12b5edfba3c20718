"""The decoding loops and what they share: the AR loop (`ar`), the Jacobi loop
(`jacobi`: keyed Jacobi, SJD, MC-SJD, their relaxed and scheduled variants, auto and branches), the
inputs and verifications that pass between the Jacobi loop's phases (`window_io`), the
finished sequences leaving the forwards (`active_rows`), and stop tokens (`stopping`)."""
