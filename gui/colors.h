// Every color the viewer draws with, as named constants, so that screenshot
// tests can look for exact pixels: solid rectangles drawn without alpha come
// out exact under Mesa's software OpenGL. Colors are RGB; to_imgui() packs
// one as an opaque ImU32 (IM_COL32 layout: 0xAABBGGRR).
#pragma once

#include <cstdint>

#include "traces/trace.h"

namespace shardscope::gui {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
};
constexpr bool operator==(Rgb a, Rgb b) {
  return a.r == b.r && a.g == b.g && a.b == b.b;
}

constexpr uint32_t to_imgui(Rgb c, uint8_t alpha = 255) {
  return (uint32_t{alpha} << 24) | (uint32_t{c.b} << 16) | (uint32_t{c.g} << 8) | uint32_t{c.r};
}

// Event fill by traces::Category, indexed by its value. Pairwise distinct and
// distinct from every UI color below.
constexpr Rgb kCategoryColors[traces::kCategoryCount] = {
    {70, 130, 220},   // compute
    {232, 140, 40},   // comm.all_gather
    {205, 60, 60},    // comm.reduce_scatter
    {150, 90, 205},   // comm.all_reduce
    {200, 170, 60},   // comm.other
    {60, 170, 90},    // memcpy.h2d
    {40, 150, 150},   // memcpy.d2h
    {125, 185, 60},   // memcpy.d2d
    {150, 150, 150},  // memset
    {105, 105, 130},  // sync
    {235, 225, 80},   // marker
    {175, 140, 110},  // host
};
constexpr Rgb category_color(traces::Category c) {
  return kCategoryColors[static_cast<int>(c)];
}
// A folded run of events narrower than the LOD threshold: the color of its
// dominant category (most event time, gui::dominant_category) at 60%
// brightness, so folds read as "many small things".
constexpr Rgb folded_color(Rgb c) {
  return {static_cast<uint8_t>(c.r * 3 / 5), static_cast<uint8_t>(c.g * 3 / 5),
          static_cast<uint8_t>(c.b * 3 / 5)};
}

// Memory categories (live buffers list, legend), by traces::MemoryCategory.
constexpr Rgb kMemoryCategoryColors[traces::kMemoryCategoryCount] = {
    {128, 128, 128},  // unknown
    {90, 160, 240},   // parameters
    {240, 150, 60},   // gradients
    {170, 110, 230},  // optimizer_state
    {90, 200, 120},   // activations
    {230, 90, 90},    // comm_buffers
    {200, 200, 90},   // temporaries
    {160, 160, 190},  // other
};

// Timeline and plots.
constexpr Rgb kBackground = {24, 24, 28};         // plot and lane area background
constexpr Rgb kLaneStripe = {32, 32, 38};         // every other lane
constexpr Rgb kRankHeader = {48, 52, 64};         // rank group header row
constexpr Rgb kRulerBackground = {36, 36, 44};    // time ruler strip
constexpr Rgb kRulerTick = {170, 170, 180};       // ticks and their labels
constexpr Rgb kStepMarker = {250, 250, 250};      // step start lines
constexpr Rgb kSelection = {255, 255, 0};         // outline of the selected event
constexpr Rgb kFlow = {255, 120, 200};            // flow arrows of the selected event
constexpr Rgb kRangeSelect = {80, 140, 255};      // drag-select band (drawn with alpha)
constexpr Rgb kMemoryAllocated = {64, 200, 248};  // allocated bytes (filled area)
constexpr Rgb kMemoryReserved = {132, 112, 188};  // reserved bytes (line)
constexpr Rgb kMemoryPeak = {255, 64, 64};        // the peak marker (vertical line)
constexpr Rgb kMemoryCursor = {255, 255, 255};    // the chosen time
// Sweep explorer.
constexpr Rgb kSweepPoint = {110, 170, 230};       // configuration that fits
constexpr Rgb kSweepPareto = {255, 196, 0};        // on the Pareto front
constexpr Rgb kSweepNotFit = {120, 70, 70};        // out of memory (or beyond the limit line)
constexpr Rgb kSweepLimit = {255, 80, 80};         // the memory-limit line
constexpr Rgb kCompareHighlight = {255, 170, 60};  // rows whose difference is large

}  // namespace shardscope::gui
