# deploy: the container image and the deployment manifests.
#
#   make container        build deploy/Dockerfile with podman (--pull=never)
#                         and write dist/dohfwd-image.tar (OCI archive)
#   make container-test   build, then run the image on loopback and query it
#   make manifest-check   decode deploy/ manifests strictly (own Go module)
#
# `make test` runs manifest-check and container-test through TEST_EXTRA.

.PHONY: container container-test manifest-check deploy-test

container:
	VERSION=$(VERSION) deploy/build-image.sh

container-test:
	deploy/container-test.sh

# The checker has its own module so the main one carries no Kubernetes
# dependency; it also runs `dohfwd check-config` on the ConfigMap's YAML.
manifest-check:
	CGO_ENABLED=0 $(GO) build -o dist/dohfwd-check ./cmd/dohfwd
	cd deploy/manifestcheck && DOHFWD_BIN=$(CURDIR)/dist/dohfwd-check $(GO) test -count=1 ./...

deploy-test: manifest-check container-test

TEST_EXTRA += manifest-check container-test
