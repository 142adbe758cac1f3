// The one place where UCX statuses become Starling statuses.
#pragma once

#include <ucs/type/status.h>

#include <string>

#include "core/status.h"

namespace starling::transport::ucx {

inline core::Status fromUcs(ucs_status_t status, const std::string& what) {
  if (status == UCS_OK || status == UCS_INPROGRESS) return core::Status::ok();
  const std::string msg = what + ": " + ucs_status_string(status);
  switch (status) {
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT:
      return core::timeout(msg);
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
      return core::unavailable(msg);
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_NOT_CONNECTED:
      return core::peerGone(msg);
    case UCS_ERR_CANCELED:
      return core::cancelled(msg);
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
    case UCS_ERR_NO_ELEM:
      return core::invalidArgument(msg);
    case UCS_ERR_BUSY:
      return core::ioError(msg + " (address already in use?)");
    default:
      return core::ioError(msg);
  }
}

}  // namespace starling::transport::ucx
