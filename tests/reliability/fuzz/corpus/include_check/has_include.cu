#if __has_include(<cuda_bf16.h>)
#include "detail/mma.cuh"
#endif
/*
*/ #include "tile.cuh"
#define A "abc"R"x(
)x"
