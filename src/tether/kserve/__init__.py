"""Code generated from proto/tether/kserve by scripts/gen_proto.sh; do not edit."""
