"""Code generated from proto/tether/v1 by scripts/gen_proto.sh; do not edit."""
