# One image definition for every service: `--build-arg SERVICE=<name>` picks the
# workspace package, installed from the lock file with `uv sync --frozen --package`.
FROM python:3.11-slim AS build
ARG SERVICE
RUN pip install --no-cache-dir uv
WORKDIR /src
COPY pyproject.toml uv.lock ./
COPY libs libs
COPY services services
COPY tools tools
RUN uv sync --frozen --no-dev --package gpuplane-${SERVICE} --no-editable

FROM python:3.11-slim
COPY --from=build /src/.venv /app/.venv
ENV PATH=/app/.venv/bin:$PATH PYTHONUNBUFFERED=1
USER 65532:65532
