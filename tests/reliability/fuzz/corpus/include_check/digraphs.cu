%:include "tile.cuh"
%:%:define X
<% %>
#define Q 1'2'/*'
#include <crt/detail.h>
*/
