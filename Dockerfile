# memeval production image: one image for the web process (daphne) and the Celery worker.
#   docker build -t memeval .      (first build ~10 min: llama-cpp-python compiles llama.cpp)
# Configuration is by environment only (see README.md and docker-compose.yml).

# --- build stage: compile the wheels (llama-cpp-python has no binary wheel on PyPI)
FROM python:3.11-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake git \
 && rm -rf /var/lib/apt/lists/*
# A portable build: the native one uses the build machine's CPU instructions (AMX, AVX-512), which
# crash on hosts that lack them.
ENV CMAKE_ARGS="-DGGML_NATIVE=OFF" \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# The pinned, hashed lock (make lock), so the image has exactly the versions the tests ran on.
COPY requirements.lock /tmp/requirements.lock
RUN pip wheel --require-hashes --wheel-dir /wheels -r /tmp/requirements.lock

# --- runtime stage: no compiler
FROM python:3.11-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 1000 memeval
# numpy's BLAS single-threaded in every process of the image (web, workers, beat): each process
# already runs several requests or tasks at once, and BLAS threads then wait for cores the others
# hold. Measured (docs/memory-systems.md, "Run numpy single-threaded"; bench/bench_memory_retrieval.py):
# a 10k x 256 matrix-vector product took 10.9 ms with OpenBLAS's default threads on a busy 2-core
# host, 0.3 ms with one. MKL and BLIS builds read their own variables. OMP_NUM_THREADS is left alone on
# purpose: llama.cpp (the embedded model) parallelises with OpenMP and sizes its own thread count.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=evalsite.settings \
    OPENBLAS_NUM_THREADS=1 \
    MKL_NUM_THREADS=1 \
    BLIS_NUM_THREADS=1
COPY --from=build /wheels /wheels
# Exactly the wheels of the lock (checked against its hashes above; llama-cpp-python's is built here).
RUN pip install --no-index --no-deps /wheels/*.whl && rm -rf /wheels

WORKDIR /app
COPY --chown=memeval:memeval . /app
# Static files are collected at build time and served by WhiteNoise (hashed names, compressed).
RUN DEBUG=false SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput \
 && chown -R memeval:memeval /app/staticfiles
USER memeval
EXPOSE 8000
# No --proxy-headers: daphne would take the client's address from the first X-Forwarded-For entry, which any
# client writes. The application reads that header only from the proxies named in TRUSTED_PROXIES
# (evalsite/clientaddr.py).
CMD ["daphne", "--bind", "0.0.0.0", "--port", "8000", "evalsite.asgi:application"]
