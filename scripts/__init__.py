"""The training scripts (`train_*.py`, run as files: `PYTHONPATH=. python scripts/train_x.py`)
over their shared module `_training.py`; a package so that they import it, and the tests
import them, by name (`scripts._training`, `scripts.train_x`). Not part of the mmspec wheel."""
