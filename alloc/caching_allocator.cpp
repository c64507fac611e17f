#include "alloc/caching_allocator.h"
