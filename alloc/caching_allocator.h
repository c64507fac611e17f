#pragma once
// Caching allocator policy: in progress.
