# datfabric: one image for the daemon (fabricd) and the consumers (fabricctl).
#
# Nothing is fetched while the image builds: the project and its dependencies come in as wheels
# made on the host, in build/wheels/ (the only part of the build context, see .dockerignore):
#   python -m tools.containers image     (or: make containers, which also runs the topology)
# By hand: pip wheel --wheel-dir build/wheels . && docker build -t datfabric:local .
#
# BASE is any image with python3 (same major.minor as the wheels) and its venv module: by default
# the stock Python image; with no registry in reach, tools/containers.py makes one from Debian's
# archive (debootstrap + docker import) and passes it here.
ARG BASE=python:3.11-slim
FROM ${BASE}

COPY build/wheels /tmp/wheels
RUN python3 -m venv /opt/datfabric \
    && /opt/datfabric/bin/pip install --no-index --no-cache-dir --disable-pip-version-check \
       --find-links /tmp/wheels datfabric \
    && rm -rf /tmp/wheels
ENV PATH=/opt/datfabric/bin:$PATH

EXPOSE 7471
CMD ["fabricd", "--listen", "0.0.0.0:7471", "--socket", "/run/datfabric/fabricd.sock"]
