"""Certificates, not GPUs: CA and serving pairs, the Secrets that hold them and webhook caBundles. May import
wire only; no GPU room imports it."""
