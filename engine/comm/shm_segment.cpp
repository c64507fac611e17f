// Creation, attach and rendezvous of the communicator's segment; layout math.
#include "engine/comm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <sstream>
#include <string>
#include <thread>

#include "engine/comm/shm_wait.h"

namespace shardscope::engine::comm::shm {

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void throw_sys(const std::string& what) {
  throw CommError(what + ": " + std::strerror(errno));
}

size_t round_up(size_t value, size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

size_t checked_add(size_t a, size_t b) {
  size_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw CommError("communicator segment size overflows");
  return r;
}

size_t checked_mul(size_t a, size_t b) {
  size_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw CommError("communicator segment size overflows");
  return r;
}

std::vector<int> group_sizes(const std::vector<Group>& groups) {
  std::vector<int> sizes;
  for (const Group& g : groups) sizes.push_back(static_cast<int>(g.ranks.size()));
  return sizes;
}

double seconds(std::chrono::milliseconds ms) {
  return static_cast<double>(ms.count()) / 1000.0;
}

std::string fmt_seconds(std::chrono::milliseconds ms) {
  std::ostringstream s;
  s << seconds(ms) << " s";
  return s.str();
}

// Writes every field of a zero-filled mapping except `ready` (left 0) and the
// rank entries (claimed by their owners).
void initialise(Segment& seg, int world_size, const std::vector<Group>& groups, size_t slot_bytes,
                size_t total_bytes, pid_t creator, uint64_t creator_start) {
  SegmentHeader& h = *new (&seg.header()) SegmentHeader{};
  h.magic = kMagic;
  h.version = kVersion;
  h.header_bytes = sizeof(SegmentHeader);
  h.world_size = static_cast<uint32_t>(world_size);
  h.num_groups = static_cast<uint32_t>(groups.size());
  h.slot_bytes = slot_bytes;
  h.total_bytes = total_bytes;
  h.group_table_checksum = group_table_checksum(world_size, groups, slot_bytes);
  h.creator_pid = creator;
  h.creator_start_time = creator_start;
  h.abort_rank.store(-1);
  for (int r = 0; r < world_size; ++r) new (&seg.rank_entry(r)) RankEntry{};
  for (int g = 0; g < seg.num_groups(); ++g) {
    new (&seg.group_control(g)) GroupControl{};
    for (int m = 0; m < seg.group_size(g); ++m) new (&seg.member(g, m)) MemberControl{};
  }
}

void claim_rank(Segment& seg, const std::string& where, int rank, pid_t pid, uint64_t start) {
  RankEntry& e = seg.rank_entry(rank);
  uint32_t expected = kRankAbsent;
  if (!e.state.compare_exchange_strong(expected, kRankClaiming)) {
    throw CommError("rank " + std::to_string(rank) + " is already attached to " + where + " (pid " +
                    std::to_string(e.pid.load()) + "): two processes were given the same rank");
  }
  e.pid.store(pid);
  e.start_time.store(start);
  e.state.store(kRankAttached, std::memory_order_release);
}

void validate_name(const std::string& name) {
  if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos ||
      name.size() > 251) {
    throw CommError("shm name \"" + name +
                    "\" is invalid: it must be \"/\" followed by 1 to 250 characters without "
                    "\"/\" (e.g. \"/shardscope-<run id>\")");
  }
}

// What a named segment's header says of its creator.
struct CreatorInfo {
  enum class Kind { vanished, no_header, foreign, ours } kind = Kind::vanished;
  off_t size = 0;
  int32_t pid = 0;
  uint64_t start = 0;
};

CreatorInfo inspect_segment(const std::string& name) {
  CreatorInfo info;
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) {
    if (errno == ENOENT) return info;  // vanished meanwhile
    throw_sys("shm segment " + name + " exists but cannot be opened to inspect it");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    throw_sys("fstat of existing shm segment " + name);
  }
  info.size = st.st_size;
  if (static_cast<size_t>(st.st_size) < sizeof(SegmentHeader)) {
    close(fd);
    info.kind = CreatorInfo::Kind::no_header;
    return info;
  }
  void* p = mmap(nullptr, sizeof(SegmentHeader), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) throw_sys("mmap of existing shm segment " + name);
  uint64_t magic = 0;
  std::memcpy(&magic, p, sizeof magic);
  std::memcpy(&info.pid, static_cast<const char*>(p) + offsetof(SegmentHeader, creator_pid),
              sizeof info.pid);
  std::memcpy(&info.start,
              static_cast<const char*>(p) + offsetof(SegmentHeader, creator_start_time),
              sizeof info.start);
  munmap(p, sizeof(SegmentHeader));
  info.kind = magic == kMagic ? CreatorInfo::Kind::ours : CreatorInfo::Kind::foreign;
  return info;
}

// Called when O_EXCL creation found `name`: returns normally when the segment
// is a stale one from a dead creator (the caller removes it), else throws.
void check_existing_is_stale(const std::string& name) {
  const CreatorInfo info = inspect_segment(name);
  if (info.kind == CreatorInfo::Kind::vanished) return;  // just retry
  if (info.kind == CreatorInfo::Kind::no_header) {
    throw CommError("shm segment " + name + " already exists with " + std::to_string(info.size) +
                    " bytes and no shardscope header: another rank 0 is creating it, or it is "
                    "not ours (remove /dev/shm" +
                    name + " if it is stale)");
  }
  if (info.kind == CreatorInfo::Kind::foreign) {
    throw CommError("shm segment " + name +
                    " already exists and is not a shardscope communicator segment; remove "
                    "/dev/shm" +
                    name + " or pick another name");
  }
  const pid_t pid = info.pid;
  const uint64_t start = info.start;
  const Liveness live = process_liveness(pid, start);
  if (live == Liveness::alive) {
    throw CommError("shm segment " + name + " already exists, created by pid " +
                    std::to_string(pid) +
                    " which is still running: another run uses the same name (give each run "
                    "its own run id)");
  }
}

std::shared_ptr<Segment> create_segment(const ShmOptions& o, const Layout& layout, pid_t pid,
                                        uint64_t start) {
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    fd = shm_open(o.name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0) break;
    if (errno != EEXIST) throw_sys("rank 0 cannot create shm segment " + o.name);
    if (attempt >= 3) {
      throw CommError("shm segment " + o.name +
                      " keeps reappearing after removing a stale one: another run uses the "
                      "same name");
    }
    check_existing_is_stale(o.name);
    if (shm_unlink(o.name.c_str()) != 0 && errno != ENOENT)
      throw_sys("cannot remove stale shm segment " + o.name);
  }
  // From here on the name is ours: remove it on any failure.
  try {
    const int rc = posix_fallocate(fd, 0, static_cast<off_t>(layout.total_bytes));
    if (rc != 0) {
      errno = rc;
      throw_sys("cannot size shm segment " + o.name + " to " + std::to_string(layout.total_bytes) +
                " bytes (is /dev/shm large enough?)");
    }
    void* p = mmap(nullptr, layout.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) throw_sys("mmap of shm segment " + o.name);
    close(fd);
    fd = -1;
    auto seg = std::make_shared<Segment>(p, layout, group_sizes(o.groups), o.slot_bytes);
    initialise(*seg, o.world_size, o.groups, o.slot_bytes, layout.total_bytes, pid, start);
    claim_rank(*seg, o.name, 0, pid, start);
    seg->header().ready.store(1, std::memory_order_release);
    return seg;
  } catch (...) {
    if (fd >= 0) close(fd);
    shm_unlink(o.name.c_str());
    throw;
  }
}

// Compares the creator's header with this rank's configuration.
void check_header(const SegmentHeader& h, const ShmOptions& o, const Layout& layout) {
  const std::string who = "rank " + std::to_string(o.rank);
  if (h.magic != kMagic)
    throw CommError("shm segment " + o.name + " is not a shardscope communicator segment");
  if (h.version != kVersion || h.header_bytes != sizeof(SegmentHeader)) {
    throw CommError("shm segment " + o.name + " has layout version " + std::to_string(h.version) +
                    " (header " + std::to_string(h.header_bytes) + " bytes) but " + who +
                    " expects version " + std::to_string(kVersion) + " (header " +
                    std::to_string(sizeof(SegmentHeader)) + " bytes): mixed shardscope builds");
  }
  if (h.world_size != static_cast<uint32_t>(o.world_size)) {
    throw CommError("shm segment " + o.name + " was created for world size " +
                    std::to_string(h.world_size) + " but " + who + " was opened with world size " +
                    std::to_string(o.world_size));
  }
  if (h.slot_bytes != o.slot_bytes) {
    throw CommError("shm segment " + o.name + " has slot_bytes " + std::to_string(h.slot_bytes) +
                    " but " + who + " was opened with slot_bytes " + std::to_string(o.slot_bytes));
  }
  const uint64_t mine = group_table_checksum(o.world_size, o.groups, o.slot_bytes);
  if (h.num_groups != o.groups.size() || h.group_table_checksum != mine) {
    throw CommError("shm segment " + o.name + " was created with a different group table (" +
                    std::to_string(h.num_groups) + " groups) than " + who + "'s (" +
                    std::to_string(o.groups.size()) +
                    " groups): every rank must pass the same groups, names and ranks");
  }
  if (h.total_bytes != layout.total_bytes) {
    throw CommError("shm segment " + o.name + " is " + std::to_string(h.total_bytes) +
                    " bytes but " + who + " computes " + std::to_string(layout.total_bytes));
  }
}

std::shared_ptr<Segment> attach_segment(const ShmOptions& o, const Layout& layout,
                                        Clock::time_point deadline, pid_t pid, uint64_t start) {
  std::string last_state = "no segment of that name exists";
  for (;;) {
    if (Clock::now() > deadline) {
      throw CommError("rank " + std::to_string(o.rank) + " could not attach to shm segment " +
                      o.name + " within " + fmt_seconds(o.timeout) + ": " + last_state +
                      " (is rank 0 running with the same name?)");
    }
    const int fd = shm_open(o.name.c_str(), O_RDWR, 0);
    if (fd < 0) {
      if (errno != ENOENT) throw_sys("rank " + std::to_string(o.rank) + " cannot open " + o.name);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      close(fd);
      throw_sys("fstat of shm segment " + o.name);
    }
    const size_t size = static_cast<size_t>(st.st_size);
    if (size < sizeof(SegmentHeader)) {  // rank 0 has not sized it yet
      close(fd);
      last_state = "the segment exists but rank 0 has not sized it yet";
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) throw_sys("mmap of shm segment " + o.name);
    const auto& h = *static_cast<const SegmentHeader*>(p);
    if (h.ready.load(std::memory_order_acquire) == 0) {
      munmap(p, size);
      last_state = "the segment exists but rank 0 has not finished initialising it";
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    if (process_liveness(h.creator_pid, h.creator_start_time) != Liveness::alive) {
      // A stale segment from an earlier run: this run's rank 0 replaces it.
      last_state = "only a stale segment created by pid " + std::to_string(h.creator_pid) +
                   " (gone) was found";
      munmap(p, size);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    try {
      check_header(h, o, layout);
      if (size != layout.total_bytes) {
        throw CommError("shm segment " + o.name + " is " + std::to_string(size) +
                        " bytes but its header says " + std::to_string(layout.total_bytes));
      }
    } catch (...) {
      munmap(p, size);
      throw;
    }
    auto seg = std::make_shared<Segment>(p, layout, group_sizes(o.groups), o.slot_bytes);
    claim_rank(*seg, o.name, o.rank, pid, start);
    return seg;
  }
}

void wait_all_attached(const Segment& seg, const ShmOptions& o, Clock::time_point deadline) {
  const SegmentHeader& h = seg.header();
  for (;;) {
    std::vector<int> missing;
    for (int r = 0; r < o.world_size; ++r)
      if (seg.rank_entry(r).state.load(std::memory_order_acquire) != kRankAttached)
        missing.push_back(r);
    if (missing.empty()) return;
    if (const std::string aborted = read_abort(h); !aborted.empty())
      throw CommError("rank " + std::to_string(o.rank) + " cannot attach to " + o.name + ": " +
                      aborted);
    if (o.rank != 0) {
      const Liveness live = process_liveness(h.creator_pid, h.creator_start_time);
      if (live != Liveness::alive) {
        throw CommError("rank 0 (pid " + std::to_string(h.creator_pid) + "), which created " +
                        o.name + ", is " + liveness_name(live) + " before every rank attached");
      }
    }
    if (Clock::now() > deadline) {
      std::string list;
      for (size_t i = 0; i < missing.size(); ++i)
        list += (i ? ", " : "") + std::to_string(missing[i]);
      throw CommError("rank " + std::to_string(o.rank) + ": timeout after " +
                      fmt_seconds(o.timeout) + " waiting for every rank to attach to " + o.name +
                      ": rank(s) " + list + " of world size " + std::to_string(o.world_size) +
                      " have not attached");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

void publish_abort(SegmentHeader& header, int rank, const std::string& message) {
  uint32_t expected = kNoAbort;
  if (!header.abort_state.compare_exchange_strong(expected, kAbortWriting)) return;
  const size_t n = std::min(message.size(), kMaxAbortMessageBytes);
  std::memcpy(header.abort_message, message.data(), n);
  header.abort_message_bytes = static_cast<uint32_t>(n);
  header.abort_rank.store(rank);
  header.abort_state.store(kAbortPublished, std::memory_order_release);
}

std::string read_abort(const SegmentHeader& header) {
  uint32_t state = header.abort_state.load(std::memory_order_acquire);
  if (state == kNoAbort) return {};
  // The writer copies at most 1 KiB between the two stores; if it died in
  // between, say so rather than wait.
  for (int i = 0; i < 100000 && state != kAbortPublished; ++i) {
    std::this_thread::yield();
    state = header.abort_state.load(std::memory_order_acquire);
  }
  if (state != kAbortPublished) return "a rank failed (it died while publishing its message)";
  return std::string(header.abort_message, header.abort_message_bytes) + " (reported by rank " +
         std::to_string(header.abort_rank.load()) + ")";
}

const char* op_name(OpKind op) {
  switch (op) {
    case OpKind::none:
      return "none";
    case OpKind::all_gather:
      return "all_gather";
    case OpKind::reduce_scatter:
      return "reduce_scatter";
    case OpKind::all_reduce:
      return "all_reduce";
    case OpKind::broadcast:
      return "broadcast";
    case OpKind::barrier:
      return "barrier";
  }
  return "unknown";
}

Layout compute_layout(int world_size, const std::vector<Group>& groups, size_t slot_bytes) {
  Layout l;
  size_t off = round_up(sizeof(SegmentHeader), kCacheLine);
  l.rank_table_offset = off;
  off = checked_add(off, checked_mul(static_cast<size_t>(world_size), sizeof(RankEntry)));
  for (const Group& g : groups) {
    l.group_control_offset.push_back(off);
    off = checked_add(off, sizeof(GroupControl) + g.ranks.size() * sizeof(MemberControl));
  }
  off = round_up(off, kDataAlignment);
  for (const Group& g : groups) {
    l.data_offset.push_back(off);
    off = checked_add(off, checked_mul(g.ranks.size(), slot_bytes));
  }
  l.total_bytes = round_up(off, kDataAlignment);
  return l;
}

uint64_t group_table_checksum(int world_size, const std::vector<Group>& groups, size_t slot_bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  };
  const int64_t w = world_size;
  const uint64_t s = slot_bytes, ng = groups.size();
  mix(&w, sizeof w);
  mix(&s, sizeof s);
  mix(&ng, sizeof ng);
  for (const Group& g : groups) {
    const uint64_t len = g.name.size(), n = g.ranks.size();
    mix(&len, sizeof len);
    mix(g.name.data(), g.name.size());
    mix(&n, sizeof n);
    for (int r : g.ranks) {
      const int64_t r64 = r;
      mix(&r64, sizeof r64);
    }
  }
  return h;
}

Segment::Segment(void* base, Layout layout, std::vector<int> sizes, size_t slot_bytes)
    : base_(static_cast<std::byte*>(base)),
      layout_(std::move(layout)),
      group_sizes_(std::move(sizes)),
      slot_bytes_(slot_bytes) {}

Segment::~Segment() {
  munmap(base_, layout_.total_bytes);
}

void validate_config(int world_size, const std::vector<Group>& groups, size_t slot_bytes) {
  if (world_size < 1) throw CommError("world_size must be >= 1, got " + std::to_string(world_size));
  if (groups.empty()) throw CommError("groups is empty: a communicator needs at least one group");
  size_t largest = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const Group& group = groups[g];
    const std::string label = "group " + std::to_string(g) + " (\"" + group.name + "\")";
    if (group.name.empty()) throw CommError("group " + std::to_string(g) + " has an empty name");
    for (size_t k = 0; k < g; ++k)
      if (groups[k].name == group.name)
        throw CommError("group name \"" + group.name + "\" is used twice (groups " +
                        std::to_string(k) + " and " + std::to_string(g) + ")");
    if (group.ranks.empty()) throw CommError(label + " has no ranks");
    for (size_t i = 0; i < group.ranks.size(); ++i) {
      const int r = group.ranks[i];
      if (r < 0 || r >= world_size)
        throw CommError(label + " holds rank " + std::to_string(r) + ", outside world size " +
                        std::to_string(world_size));
      if (i > 0 && r <= group.ranks[i - 1])
        throw CommError(label + " ranks must be strictly ascending (" +
                        std::to_string(group.ranks[i - 1]) + " then " + std::to_string(r) + ")");
    }
    largest = std::max(largest, group.ranks.size());
  }
  if (slot_bytes % 128 != 0 || slot_bytes < 8 * largest) {
    throw CommError("slot_bytes " + std::to_string(slot_bytes) +
                    " must be a multiple of 128 and at least 8 x the largest group size (" +
                    std::to_string(8 * largest) + ")");
  }
}

std::shared_ptr<Segment> make_heap_segment(int world_size, const std::vector<Group>& groups,
                                           size_t slot_bytes) {
  validate_config(world_size, groups, slot_bytes);
  const Layout layout = compute_layout(world_size, groups, slot_bytes);
  void* p =
      mmap(nullptr, layout.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw_sys("mmap of " + std::to_string(layout.total_bytes) + " bytes for thread communicators");
  auto seg = std::make_shared<Segment>(p, layout, group_sizes(groups), slot_bytes);
  const pid_t pid = getpid();
  const uint64_t start = process_start_time(pid);
  initialise(*seg, world_size, groups, slot_bytes, layout.total_bytes, pid, start);
  for (int r = 0; r < world_size; ++r) claim_rank(*seg, "thread communicators", r, pid, start);
  seg->header().ready.store(1, std::memory_order_release);
  return seg;
}

std::vector<std::string> remove_stale_segments(const std::string& prefix,
                                               const std::string& shm_dir) {
  std::vector<std::string> removed;
  DIR* d = opendir(shm_dir.c_str());
  if (!d) return removed;  // no /dev/shm: nothing can be stale
  std::vector<std::string> candidates;
  while (const dirent* e = readdir(d)) {
    const std::string file = e->d_name;
    if (file.rfind(prefix, 0) == 0) candidates.push_back(file);
  }
  closedir(d);
  for (const std::string& file : candidates) {
    const std::string name = "/" + file;
    CreatorInfo info;
    try {
      info = inspect_segment(name);
    } catch (const CommError&) {
      continue;  // another user's, or unreadable: not ours to judge
    }
    // A header without a creator yet is being initialised: leave it.
    if (info.kind != CreatorInfo::Kind::ours || info.pid <= 0) continue;
    if (process_liveness(info.pid, info.start) == Liveness::alive) continue;
    if (shm_unlink(name.c_str()) == 0) removed.push_back(name);
  }
  return removed;
}

std::shared_ptr<Segment> open_process_segment(const ShmOptions& o) {
  validate_name(o.name);
  validate_config(o.world_size, o.groups, o.slot_bytes);
  if (o.rank < 0 || o.rank >= o.world_size)
    throw CommError("rank " + std::to_string(o.rank) + " is outside world size " +
                    std::to_string(o.world_size));
  if (o.timeout.count() <= 0) throw CommError("timeout must be positive");
  const Layout layout = compute_layout(o.world_size, o.groups, o.slot_bytes);
  const auto deadline = Clock::now() + o.timeout;
  const pid_t pid = getpid();
  const uint64_t start = process_start_time(pid);
  if (o.rank != 0) {
    auto seg = attach_segment(o, layout, deadline, pid, start);
    wait_all_attached(*seg, o, deadline);
    return seg;
  }
  // Segments whose rank 0 died before unlinking them (killed between
  // creation and the last attach) are removed here, by the next run.
  remove_stale_segments();
  auto seg = create_segment(o, layout, pid, start);
  try {
    wait_all_attached(*seg, o, deadline);
  } catch (const CommError& e) {
    publish_abort(seg->header(), 0, e.what());  // ranks that did attach fail at once
    shm_unlink(o.name.c_str());
    throw;
  }
  // Every rank holds a mapping now: the name is no longer needed.
  if (shm_unlink(o.name.c_str()) != 0) throw_sys("rank 0 cannot unlink shm segment " + o.name);
  return seg;
}

}  // namespace shardscope::engine::comm::shm
