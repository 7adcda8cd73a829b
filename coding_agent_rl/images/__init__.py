"""Task images: the base image, dataset images (Dockerfile contexts, registry pulls, builds from a
repository's git source) and the local backend's root filesystems. Built by ``coding-agent-rl
images``; the sandbox backends only run them."""
