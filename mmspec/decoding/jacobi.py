"""The Jacobi loop's old home: `mmspec.decoding.loop.jacobi` is the module, and this name
is that module (so that patching one patches the other). The pipelines still import it here."""

import sys

from mmspec.decoding.loop import jacobi

sys.modules[__name__] = jacobi
