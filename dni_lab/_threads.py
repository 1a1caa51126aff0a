"""The thread policy, set before torch loads its OpenMP runtime.

torch's CPU kernels run on OpenMP threads. libgomp's threads spin for 300,000
iterations while they wait for the next parallel region; beside busy processes a
spinning thread burns the time slice its partner needs to finish the region. The merged
probe's solver runs thousands of short regions per fit, so it suffered most. Ten Newton
steps of the demo's probe (two threads, two cores):

=============================  =======  ==========================
waiting                        alone    beside two busy loops
=============================  =======  ==========================
spin 300,000 (the default)     12.3 s   30.7 s
sleep (``OMP_WAIT_POLICY``)    12.3 s   20.3 s
spin 1,000 (this policy)       11.4 s   18.7 s
one thread instead of two      19.8 s   31.8 s
=============================  =======  ==========================

(sleeping at once cost the whole demo 3 to 4 s alone, in its many shorter waits.) So
waiting threads spin briefly, then sleep: ``GOMP_SPINCOUNT=1000``, which is what
libgomp itself picks when it sees more threads than CPUs.

libgomp reads the variable once, when torch loads it: a process that imported torch
before ``dni_lab`` keeps its own policy, and a value already in the environment (or an
``OMP_WAIT_POLICY``, which takes precedence) is left alone. Other OpenMP runtimes
ignore it.
"""

from __future__ import annotations

import os

SPINCOUNT = os.environ.setdefault("GOMP_SPINCOUNT", "1000")
