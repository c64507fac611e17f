// Anchor for the tests precompiled header (tests/CMakeLists.txt).
