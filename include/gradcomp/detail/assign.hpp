// Copy assignment with the strong guarantee, for the types whose copy may throw (it allocates)
// and whose move assignment does not: `self` becomes a copy of `other`, or stays as it was when
// the copy throws.
#pragma once

#include <utility>

namespace gradcomp {
namespace detail {

template <class T>
T& copy_assign(T& self, const T& other) {
  if (&self != &other) {
    T copy(other);
    self = std::move(copy);
  }
  return self;
}

}  // namespace detail
}  // namespace gradcomp
