# Offline stand-in for ghcr.io/shopify/toxiproxy:2.12.0: the same server, built from its Go module
# on the host (static, CGO off) by scripts/build-images. Same entrypoint and default flags.
FROM scratch
COPY docker/toxiproxy/toxiproxy-server /toxiproxy
COPY docker/toxiproxy/toxiproxy-cli /toxiproxy-cli
EXPOSE 8474
ENTRYPOINT ["/toxiproxy"]
CMD ["-host=0.0.0.0"]
