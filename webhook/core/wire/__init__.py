"""What travels on the wire, exactly: Quantity, JSON numbers, GPU resource and annotation names, gpu-mem
units, JSON Pointer. Imports nothing of ours: every other room reads its names and numbers from here."""
