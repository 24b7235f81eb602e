# syntax=docker/dockerfile:1
# tether's serving image: `tether serve` on the model directory mounted at /models.
#
#   docker build -t tether:0.1.0 .
#   docker run --rm -p 50051:50051 -p 50053:50053 -v "$PWD/my_policy:/models:ro" tether:0.1.0
#
# SIGHUP (`docker kill -s HUP CONTAINER`) or the admin RPC (`tether admin reload`, run
# inside the container) re-reads /models without a restart; SIGTERM drains and exits 0.
# Ports: 50051 gRPC (PolicyService, health, reflection), 50053 Prometheus metrics; the
# admin port 50052 listens on the container's loopback only (`docker exec` reaches it).
# tests/deploy/test_image_tree.py (pytest -m slow) runs the build stage's commands in a
# fresh venv and this file's entry point against a model directory: keep the two in step.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV TETHER_VENV=/opt/tether \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /build
COPY pyproject.toml README.md constraints.txt ./
COPY src/ src/
# torch's CPU build (constraints.txt pins torch==2.13.0+cpu): PyPI's torch is the CUDA
# build with several GB of nvidia-* wheels.
RUN python -m venv "$TETHER_VENV" \
 && "$TETHER_VENV/bin/pip" install --extra-index-url https://download.pytorch.org/whl/cpu \
        -c constraints.txt .
# The position supervisor's kernel, compiled once here into numba's cache beside the
# installed module: the image's user cannot write there, and would otherwise compile it
# (about 15-25 s) at every start.
RUN "$TETHER_VENV/bin/python" -c "from tether.safety.position import kernel; kernel.warm()"

FROM ${PYTHON_IMAGE}
# tini as PID 1: it forwards SIGTERM and SIGHUP to tether and reaps children; a Python
# PID 1 would ignore SIGTERM until its handlers are installed.
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 tether \
 && useradd --system --uid 10001 --gid tether --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin tether \
 && mkdir -p /models \
 && chown tether:tether /models
ENV TETHER_VENV=/opt/tether \
    PATH=/opt/tether/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLCONFIGDIR=/tmp/matplotlib
COPY --from=build /opt/tether /opt/tether
COPY deploy/server.yaml /etc/tether/server.yaml
COPY deploy/healthcheck.py deploy/sim_robot.py /etc/tether/
VOLUME ["/models"]
USER 10001:10001
EXPOSE 50051 50053
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "/etc/tether/healthcheck.py", "127.0.0.1:50051"]
ENTRYPOINT ["tini", "--", "tether", "serve", "--model-dir", "/models", "--config", "/etc/tether/server.yaml"]
CMD []
