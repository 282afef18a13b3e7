"""The ready nightly DAG and its gates file, shipped with the package (a copy is in the repository's dags/)."""
