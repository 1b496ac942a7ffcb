"""The kernels: elementwise programs run through the generator, and templated kernels by family
(reduce, scan, matmul, sort, indexing, conv, pool, nn, random)."""
