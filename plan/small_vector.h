// A vector of trivially copyable values that keeps up to N of them inline and
// only goes to the heap beyond that. Schedule ops and actions carry short
// lists (waits, buffers, pending ops: usually under 8 entries); one heap
// allocation per list made planning a 4,000-op schedule malloc-bound.
//
// The subset of std::vector the planner, simulator and checkers use;
// iterators are plain pointers, invalidated like std::vector's.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <new>
#include <type_traits>
#include <vector>

namespace shardscope::plan {

template <typename T, size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable<T>::value, "SmallVector holds trivially copyable T");
  static_assert(N > 0, "SmallVector needs inline capacity");

 public:
  using value_type = T;
  using size_type = size_t;
  using iterator = T*;
  using const_iterator = const T*;
  using reference = T&;
  using const_reference = const T&;

  SmallVector() = default;
  SmallVector(std::initializer_list<T> init) { assign(init.begin(), init.end()); }
  SmallVector(const std::vector<T>& v) { assign(v.data(), v.data() + v.size()); }  // NOLINT
  SmallVector(const SmallVector& o) { assign(o.begin(), o.end()); }
  SmallVector(SmallVector&& o) noexcept { steal(o); }
  SmallVector& operator=(const SmallVector& o) {
    if (this != &o) {
      clear();
      assign(o.begin(), o.end());
    }
    return *this;
  }
  SmallVector& operator=(SmallVector&& o) noexcept {
    if (this != &o) {
      release();
      steal(o);
    }
    return *this;
  }
  SmallVector& operator=(std::initializer_list<T> init) {
    clear();
    assign(init.begin(), init.end());
    return *this;
  }
  ~SmallVector() { release(); }

  T* data() { return heap_ ? heap_ : inline_; }
  const T* data() const { return heap_ ? heap_ : inline_; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  size_t size() const { return size_; }
  size_t capacity() const { return heap_ ? capacity_ : N; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T& back() { return data()[size_ - 1]; }
  const T& back() const { return data()[size_ - 1]; }
  void clear() { size_ = 0; }

  void reserve(size_t n) {
    if (n <= capacity()) return;
    T* fresh = static_cast<T*>(std::malloc(n * sizeof(T)));
    if (!fresh) throw std::bad_alloc();
    if (size_) std::memcpy(fresh, data(), size_ * sizeof(T));
    std::free(heap_);
    heap_ = fresh;
    capacity_ = n;
  }
  void push_back(const T& v) {
    if (size_ == capacity()) {
      const T copy = v;  // v may live in this vector
      reserve(2 * capacity());
      data()[size_++] = copy;
      return;
    }
    data()[size_++] = v;
  }
  void emplace_back(const T& v) { push_back(v); }
  // Inserts [first, last) (which must not point into this vector) before pos.
  template <typename It>
  T* insert(T* pos, It first, It last) {
    const size_t at = static_cast<size_t>(pos - data());
    const auto n = static_cast<size_t>(std::distance(first, last));
    if (size_ + n > capacity()) reserve(std::max(size_ + n, 2 * capacity()));
    T* p = data();
    std::memmove(p + at + n, p + at, (size_ - at) * sizeof(T));
    std::copy(first, last, p + at);
    size_ += n;
    return p + at;
  }
  T* erase(T* first, T* last) {
    const auto n = static_cast<size_t>(last - first);
    std::memmove(first, last, static_cast<size_t>(end() - last) * sizeof(T));
    size_ -= n;
    return first;
  }
  T* erase(T* pos) { return erase(pos, pos + 1); }

  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const SmallVector& a, const SmallVector& b) { return !(a == b); }
  std::vector<T> to_vector() const { return std::vector<T>(begin(), end()); }

 private:
  template <typename It>
  void assign(It first, It last) {
    reserve(static_cast<size_t>(std::distance(first, last)));
    std::copy(first, last, data());
    size_ = static_cast<size_t>(std::distance(first, last));
  }
  void steal(SmallVector& o) {
    size_ = o.size_;
    if (o.heap_) {
      heap_ = o.heap_;
      capacity_ = o.capacity_;
      o.heap_ = nullptr;
      o.capacity_ = 0;
    } else if (size_) {
      std::memcpy(inline_, o.inline_, size_ * sizeof(T));
    }
    o.size_ = 0;
  }
  void release() {
    std::free(heap_);
    heap_ = nullptr;
    capacity_ = 0;
  }

  T inline_[N] = {};
  T* heap_ = nullptr;  // non-null: the elements live here, with capacity_ slots
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace shardscope::plan
