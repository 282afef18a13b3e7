"""``python -m airflow_metric_gate.cli``: the same as the ``metric-gate`` command."""

import sys

from airflow_metric_gate.cli.main import main

if __name__ == "__main__":  # imported, as a walk over the package's modules does, it runs nothing
    sys.exit(main())
