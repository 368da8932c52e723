"""spark-submit's entry point for gpuwaste: the same command line as `gpuwaste`, run by Spark.

    spark-submit --master spark://head:7077 gpuwaste_analyze.py \
        analyze --engine spark --data-dir /shared/gpuwaste

`--engine spark` without `--spark-master` uses the master spark-submit was given. gpuwaste (with
the same version of pyspark as spark-submit's Spark) must be installed in the Python of the
driver and of every worker (PYSPARK_PYTHON).
"""

from gpuwaste.__main__ import main

if __name__ == "__main__":
    main()
