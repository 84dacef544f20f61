# One non-root image for every part: `gpushare webhook | extender | device-plugin | ensure-certs | check`.
# Build: docker build -t ghcr.io/gpushare/gpushare-webhook:0.2.0 .
# scripts/image builds it with Debian's podman on a base of Debian's python3 (PYTHON_IMAGE), and
# tests/e2e/test_image.py runs every entry point from it as the chart does.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Build tools only live in this stage; versions pinned like pyproject's.
RUN python -m venv /opt/build \
 && /opt/build/bin/pip install setuptools==80.9.0 wheel==0.45.1 grpcio-tools==1.85.1
COPY pyproject.toml README.md constraints.txt ./
COPY scripts/gen-proto scripts/gen-proto
COPY webhook webhook
# The gRPC stubs of the kubelet device-plugin API are generated here from api.proto (the committed copies
# must be identical; tests/deviceplugin checks that), then packaged into the wheel.
RUN PYTHON=/opt/build/bin/python bash scripts/gen-proto \
 && /opt/build/bin/pip wheel --no-deps --no-build-isolation -w /dist . \
 && python -m venv /opt/gpushare \
 && /opt/gpushare/bin/pip install -c constraints.txt /dist/*.whl \
 && /opt/gpushare/bin/pip uninstall -y -q pip setuptools \
 && rm -rf /opt/gpushare/lib/python3*/site-packages/kubernetes/aio \
 && /opt/gpushare/bin/gpushare --version
# Above: nothing installs at run time, and the kubernetes client's asyncio copy (68 MB) is never imported.

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="gpushare-webhook" \
      org.opencontainers.image.description="GPU-memory sharing: admission webhook, scheduler extender, device plugin" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/gpushare/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /opt/gpushare /opt/gpushare
# 65532 = the distroless "nonroot" user; the chart runs with the same ids and a read-only root filesystem.
RUN groupadd --system --gid 65532 nonroot \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin nonroot
USER 65532:65532
WORKDIR /tmp
EXPOSE 8443 39999
ENTRYPOINT ["gpushare"]
CMD ["--help"]
