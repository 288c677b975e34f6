# datfabric: one image for the daemon (fabricd), the Python consumers (fabricctl) and C DAT
# programs (Debian's dtest and dapltest over libdatfabric).
#
# Nothing is fetched while the image builds: everything comes in from build/ (the only part of
# the build context, see .dockerignore), made on the host by tools/context.py:
#   python -m tools.containers image     (or: make containers, which also runs the topology)
#   build/wheels    the project and its Python dependencies (pip wheel)
#   build/debs      Debian's dapl2-utils, libdat2 and msgpack-c runtime (apt-get download)
#   build/provider  libdatfabric.so (make provider)
#
# BASE is any Debian image with python3 (same major.minor as the wheels, same Debian release as
# the host the packages came from) and its venv module: by default the stock Python image; with
# no registry in reach, tools/containers.py makes one from Debian's archive (debootstrap +
# docker import) and passes it here.
ARG BASE=python:3.11-slim
FROM ${BASE}

COPY build/debs /tmp/debs
RUN dpkg -i /tmp/debs/*.deb && rm -rf /tmp/debs

COPY build/wheels /tmp/wheels
RUN python3 -m venv /opt/datfabric \
    && /opt/datfabric/bin/pip install --no-index --no-cache-dir --disable-pip-version-check \
       --find-links /tmp/wheels datfabric \
    && rm -rf /tmp/wheels
ENV PATH=/opt/datfabric/bin:$PATH

# C DAT programs open IA "datfabric": the node's socket, as every container mounts it.
COPY build/provider/libdatfabric.so /usr/local/lib/datfabric/libdatfabric.so
RUN fabricctl dat-conf --socket /run/datfabric/fabricd.sock --name datfabric \
      --library /usr/local/lib/datfabric/libdatfabric.so --output /etc/datfabric-dat.conf
ENV DAT_OVERRIDE=/etc/datfabric-dat.conf

EXPOSE 7471
# The cluster key is a secret mounted at run time (docker-compose.yml, deploy/k8s), never baked in.
CMD ["fabricd", "--listen", "0.0.0.0:7471", "--socket", "/run/datfabric/fabricd.sock", \
     "--cluster-key", "/run/secrets/cluster-key"]
