auto s = R"x(" /*)x";
#include "tile.cuh"
// */
const char* t = u8R"(
#include "x.h"
)";
