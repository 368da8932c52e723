#!/bin/sh
# `gpuwaste analyze` on a Spark standalone cluster, through spark-submit (client mode: the driver
# runs here and commits the results; executors read the warehouse and write their staged rows at
# the same path, so /shared/gpuwaste must be mounted at that path on every worker).
#
# Every machine: Java 17, and the same Python with the same `gpuwaste[spark]` installed, e.g. a
# virtualenv on the shared filesystem (/shared/venvs/gpuwaste). spark-submit is the one pyspark
# ships ($VENV/bin/spark-submit), so its Spark is the pyspark version the workers run.
set -eu
VENV=/shared/venvs/gpuwaste
MASTER=spark://spark-head:7077
DATA_DIR=/shared/gpuwaste

export PYSPARK_PYTHON="$VENV/bin/python"
exec "$VENV/bin/spark-submit" \
  --master "$MASTER" \
  --deploy-mode client \
  --executor-cores 1 \
  --executor-memory 1g \
  --conf spark.executor.pyspark.memory=2g \
  "$(dirname "$0")/gpuwaste_analyze.py" \
  analyze --engine spark --data-dir "$DATA_DIR" --batch-days 1

# Without spark-submit, the same from any machine that can reach the master:
#   PYSPARK_PYTHON=$VENV/bin/python $VENV/bin/gpuwaste analyze --engine spark \
#       --spark-master "$MASTER" --data-dir "$DATA_DIR" --batch-days 1
