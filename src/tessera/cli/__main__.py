"""``python -m tessera.cli ...``: the ``tessera`` command without the installed script.

Used where the console script may not be on ``PATH`` (a bare checkout with ``PYTHONPATH=src``,
or a test starting the live service as a subprocess: ``python -m tessera.cli serve ...``).
"""

from tessera.cli import main

main()
