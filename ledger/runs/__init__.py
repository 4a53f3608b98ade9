"""The run lifecycle: ``launch`` (tracked runs), ``sweep`` (strategy sweeps), ``registry`` (list, show, reap),
``plan`` (the cheapest plan that fits: ``trainledger plan recommend``)."""
