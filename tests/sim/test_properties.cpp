// Placeholder.
#include <catch2/catch.hpp>
