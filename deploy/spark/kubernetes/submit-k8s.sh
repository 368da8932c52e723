#!/bin/sh
# `gpuwaste analyze --engine spark` on Spark on Kubernetes, the driver in the cluster too
# (cluster mode). Build the image from the repository root first:
#   docker build -f deploy/spark/kubernetes/Dockerfile -t registry.example/gpuwaste-spark:0.1.0 .
# and create the ReadWriteMany claim: kubectl apply -f deploy/spark/kubernetes/gpuwaste-data-pvc.yaml
# Any spark-submit of the same Spark version submits it (e.g. the one `pip install gpuwaste[spark]`
# installs).
set -eu
API=https://kubernetes.example:6443
IMAGE=registry.example/gpuwaste-spark:0.1.0
NAMESPACE=gpuwaste
VOL=spark.kubernetes.driver.volumes.persistentVolumeClaim.data
EVOL=spark.kubernetes.executor.volumes.persistentVolumeClaim.data

exec spark-submit \
  --master "k8s://$API" \
  --deploy-mode cluster \
  --name gpuwaste-analyze \
  --conf spark.kubernetes.namespace="$NAMESPACE" \
  --conf spark.kubernetes.container.image="$IMAGE" \
  --conf spark.kubernetes.authenticate.driver.serviceAccountName=spark \
  --conf spark.executor.instances=4 \
  --conf spark.executor.cores=1 \
  --conf spark.executor.memory=1g \
  --conf spark.executor.pyspark.memory=2g \
  --conf "$VOL.options.claimName=gpuwaste-data" \
  --conf "$VOL.mount.path=/var/lib/gpuwaste" \
  --conf "$EVOL.options.claimName=gpuwaste-data" \
  --conf "$EVOL.mount.path=/var/lib/gpuwaste" \
  local:///opt/gpuwaste/gpuwaste_analyze.py \
  analyze --engine spark --data-dir /var/lib/gpuwaste --batch-days 1
