# datfabric: one image for the daemon (fabricd) and the consumers (fabricctl).
FROM python:3.11-slim

# iproute2: `ip`, for looking at the container's network when debugging a fabric.
RUN apt-get update \
    && apt-get install -y --no-install-recommends iproute2 \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
# pyproject.toml names README.md as the readme: the build fails without it.
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY fabricd ./fabricd
COPY client ./client
COPY bench ./bench
COPY tools ./tools
RUN pip install --no-cache-dir . && rm -rf /src
WORKDIR /

EXPOSE 7471
CMD ["fabricd", "--listen", "0.0.0.0:7471", "--socket", "/run/datfabric/fabricd.sock"]
