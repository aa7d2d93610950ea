# The Open Memory commons node (openmemory-node) in a container.
#
#   docker build -t openmemory-node .
#   docker run -d --name om -v om-data:/data -p 4771:4771 openmemory-node
#   docker exec om openmemory-node status
#
# The data folder (key, store, configuration) is the /data volume. The local API listens on
# 127.0.0.1 inside the container: use it with `docker exec`, it is not published.

# -- build: py-libp2p's fastecdsa compiles from source (gcc, libgmp-dev) ----------------------
FROM python:3.11-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential libgmp-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY openmemory_local ./openmemory_local
COPY openmemory_protocol ./openmemory_protocol
COPY openmemory_node ./openmemory_node
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[node]'

# -- run: the wheels and the GMP runtime only -------------------------------------------------
FROM python:3.11-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgmp10 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links=/wheels 'openmemory[node]' \
 && rm -rf /wheels
ENV OPENMEMORY_NODE_HOME=/data
VOLUME /data
EXPOSE 4771
HEALTHCHECK --interval=30s --timeout=5s CMD openmemory-node status > /dev/null || exit 1
# `init` is idempotent: it creates the key and configuration on the first start only.
CMD ["sh", "-c", "openmemory-node init --listen /ip4/0.0.0.0/tcp/4771 && exec openmemory-node start"]
