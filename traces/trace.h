#pragma once
// The trace model lands with the traces issue.
