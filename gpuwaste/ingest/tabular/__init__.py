"""Generic CSV / parquet exports with a TOML column mapping -> samples, jobs, job_gpus."""
