# Prometheus for the compose `observability` profile, offline: Debian 12's prometheus package (2.42), whose
# binaries scripts/build-images extracts on the host (they need only libc), on the project's Debian base image.
# Online, DILOCO_PROMETHEUS_IMAGE=prom/prometheus:v2.42.0 does the same: the config is mounted, not built in.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
COPY docker/prometheus/prometheus docker/prometheus/promtool /bin/
RUN mkdir -p /prometheus /etc/prometheus && chown nobody:nogroup /prometheus
USER nobody
EXPOSE 9090
WORKDIR /prometheus
ENTRYPOINT ["/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
