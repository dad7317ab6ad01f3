# zsnli server image: the project installed, model/ served offline, as a non-root user.
#
#   docker build -t zsnli:0.1.0 .                                       # CPU torch
#   docker build -t zsnli:0.1.0-gpu --build-arg TORCH_VARIANT=cuda .    # CUDA torch (PyPI's Linux wheel): serves on a GPU
#   docker run --rm -p 8000:8000 zsnli:0.1.0
#   docker run --rm --gpus all -p 8000:8000 zsnli:0.1.0-gpu
#
# The build prints which torch it installed (and stops when it is not the TORCH_VARIANT asked for); the server
# logs it again at start ("torch 2.13.0+cu128, CUDA 12.8, 1 GPU: ...; serving on cuda"), and warns when a CPU
# build of torch runs on a machine with an NVIDIA GPU.
#
# Without a registry (no python:3.11-slim-bookworm to pull), any Debian bookworm image holding python3 and
# python3-venv serves as BASE_IMAGE: .ci/container_test.py builds one with mmdebstrap and runs this image
# the way the Kubernetes manifests do (see docs/deployment.md).
#
# Kubernetes manifests: deploy/kubernetes/ (the Deployment runs this image read-only; /tmp and /var/lib/zsnli,
# the bake-off's store and key, are emptyDir volumes).
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

ARG TORCH_VERSION=2.13.0
# Which torch: cpu (the default) or cuda (a CUDA build, to serve on an NVIDIA GPU).
ARG TORCH_VARIANT=cpu
# Wheel index for torch; empty = PyPI (whose Linux torch wheel is a CUDA build). The default is PyTorch's
# CPU-only index; with TORCH_VARIANT=cuda that default gives way to PyPI, and any other index given (e.g.
# https://download.pytorch.org/whl/cu128) is used as it is.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# Extra pip options for every install, e.g. a local wheel folder mounted into the build
# (`podman build -v /opt/wheels:/wheels:ro --build-arg PIP_OPTIONS="--find-links /wheels"`); empty = none.
ARG PIP_OPTIONS=

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_DATASETS_OFFLINE=1 \
    HF_HOME=/tmp/huggingface \
    XDG_CACHE_HOME=/tmp/.cache \
    HOME=/tmp \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    ZSNLI_MODEL_DIR=/app/model \
    ZSNLI_BAKEOFF_DB=/var/lib/zsnli/bakeoffs.sqlite3 \
    ZSNLI_RECEIPT_KEY=/var/lib/zsnli/receipt-ed25519.pem \
    HOST=0.0.0.0 \
    PORT=8000

RUN groupadd --system --gid 10001 zsnli \
    && useradd --system --uid 10001 --gid 10001 --home-dir /app --shell /usr/sbin/nologin zsnli \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/zsnli

# The bake-off's store and receipt key (ZSNLI_BAKEOFF_DB, ZSNLI_RECEIPT_KEY): the one writable place the server
# needs besides /tmp; mount a volume here (the Kubernetes manifests do) when the root filesystem is read-only.
VOLUME ["/var/lib/zsnli"]

WORKDIR /app

# The project's own environment (first on PATH above, written out: an imported base image may set none): the
# same on python:3.11-slim and on Debian's python3, whose system interpreter refuses pip installs (PEP 668).
RUN python3 -m venv /opt/venv

# torch alone first (the largest layer, reused while the project changes), checked against TORCH_VARIANT.
RUN index="$TORCH_INDEX_URL" \
    && case "$TORCH_VARIANT" in \
         cpu) ;; \
         cuda) if [ "$index" = "https://download.pytorch.org/whl/cpu" ]; then index=""; fi ;; \
         *) echo "TORCH_VARIANT must be cpu or cuda, got '$TORCH_VARIANT'" >&2; exit 2 ;; \
       esac \
    && pip install $PIP_OPTIONS ${index:+--index-url "$index"} "torch==${TORCH_VERSION}" \
    && cuda="$(python -c 'import torch; print(torch.version.cuda or "")')" \
    && echo "installed torch ${TORCH_VERSION} (TORCH_VARIANT=${TORCH_VARIANT}): CUDA ${cuda:-none}" \
    && if { [ "$TORCH_VARIANT" = cuda ] && [ -z "$cuda" ]; } || { [ "$TORCH_VARIANT" = cpu ] && [ -n "$cuda" ]; }; then \
         echo "the torch installed does not match TORCH_VARIANT=$TORCH_VARIANT (CUDA: ${cuda:-none})" >&2; exit 3; \
       fi
LABEL org.zsnli.torch-variant="${TORCH_VARIANT}"

COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install $PIP_OPTIONS . && python -c "import zsnli.serving.app"

# Served files stay owned by root (read-only for the server user); the manifest check re-hashes model/.
COPY model ./model
COPY server.py serve.sh calibration.json training_manifest.json data_sources.json ./

USER 10001:10001
EXPOSE 8000
STOPSIGNAL SIGTERM
# serve.sh execs python: the server is PID 1 and gets SIGTERM itself (drain, then exit 0).
CMD ["./serve.sh"]
