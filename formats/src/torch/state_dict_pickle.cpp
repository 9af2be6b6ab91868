// A restricted unpickler for PyTorch state dicts: the pickle machine's stack, marks and memo
// over an arena of plain objects (indices, never owning pointers, so self-referencing input
// cannot leak or recurse), the opcodes protocols 2 to 5 use for dicts, tuples, lists, ints,
// floats, strings and globals, and only these callables: collections.OrderedDict,
// torch._utils._rebuild_tensor_v2 / _rebuild_tensor_v3 / _rebuild_parameter. A global is
// checked when it is named, so `os.system` is refused before anything could call it.
// Work is linear in the input: an opcode that reuses an object (BINGET of a big tuple or string)
// never copies it whole; what must look at a reused object's bytes (hashing a dict key, copying a
// name, a storage key or a size tuple into the result) is charged to a budget proportional to the
// pickle's size (kPickleWorkPerByte), so 8 MB of pickle cannot ask for gigabytes or hours.
#include <array>
#include <bit>
#include <cstring>
#include <optional>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "../located_error.hpp"
#include "qload/formats/torch_file.hpp"

namespace qload::formats {
namespace {

enum class Kind : std::uint8_t {
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kTuple,
  kList,
  kDict,
  kGlobal,
  kStorage,
  kTensor
};

struct Object {
  Kind kind = Kind::kNone;
  std::int64_t i = 0;                // kBool, kInt; kTensor: index into Machine::tensors; kStorage: its key's id
  double f = 0;                      // kFloat
  std::string s;                     // kString; kGlobal: "module.name"
  std::vector<std::uint32_t> items;  // kTuple, kList; kDict: key, value, key, value...
  DType dtype = DType::kU8;          // kStorage (typed storages), kGlobal naming a dtype
  std::uint64_t bytes = 0;           // kStorage: declared size in bytes
  std::uint32_t depth = 0;           // container nesting below this object
};

// The storage classes torch.save names in persistent ids, and the dtypes _rebuild_tensor_v3 takes.
struct NamedDtype {
  std::string_view name;
  DType dtype;
};
constexpr std::array<NamedDtype, 10> kStorageTypes = {{{"torch.FloatStorage", DType::kF32},
                                                       {"torch.DoubleStorage", DType::kF64},
                                                       {"torch.HalfStorage", DType::kF16},
                                                       {"torch.BFloat16Storage", DType::kBF16},
                                                       {"torch.LongStorage", DType::kI64},
                                                       {"torch.IntStorage", DType::kI32},
                                                       {"torch.ShortStorage", DType::kI16},
                                                       {"torch.CharStorage", DType::kI8},
                                                       {"torch.ByteStorage", DType::kU8},
                                                       {"torch.BoolStorage", DType::kBool}}};
constexpr std::array<NamedDtype, 19> kDtypes = {{{"torch.float32", DType::kF32},
                                                 {"torch.float64", DType::kF64},
                                                 {"torch.float16", DType::kF16},
                                                 {"torch.bfloat16", DType::kBF16},
                                                 {"torch.int64", DType::kI64},
                                                 {"torch.int32", DType::kI32},
                                                 {"torch.int16", DType::kI16},
                                                 {"torch.int8", DType::kI8},
                                                 {"torch.uint8", DType::kU8},
                                                 {"torch.uint16", DType::kU16},
                                                 {"torch.uint32", DType::kU32},
                                                 {"torch.uint64", DType::kU64},
                                                 {"torch.bool", DType::kBool},
                                                 {"torch.complex64", DType::kC64},
                                                 {"torch.float8_e4m3fn", DType::kF8_E4M3},
                                                 {"torch.float8_e5m2", DType::kF8_E5M2},
                                                 {"torch.float8_e4m3fnuz", DType::kF8_E4M3FNUZ},
                                                 {"torch.float8_e5m2fnuz", DType::kF8_E5M2FNUZ},
                                                 {"torch.float8_e8m0fnu", DType::kF8_E8M0}}};
constexpr std::string_view kOrderedDict = "collections.OrderedDict";
constexpr std::string_view kRebuildV2 = "torch._utils._rebuild_tensor_v2";
constexpr std::string_view kRebuildV3 = "torch._utils._rebuild_tensor_v3";
constexpr std::string_view kRebuildParameter = "torch._utils._rebuild_parameter";
constexpr std::string_view kUntypedStorage = "torch.storage.UntypedStorage";

// A _rebuild_tensor call. Its tuples and storage key stay objects (by id) until the state dict
// names the tensor: a size tuple reused by many tensors is checked and copied once per named
// tensor, at most kMaxTensorDims items, never per REDUCE.
struct RebuiltTensor {
  std::uint32_t storage = 0;  // a kStorage object
  std::uint32_t size = 0;     // kTuple objects of equal length
  std::uint32_t stride = 0;
  std::uint64_t storage_offset = 0;
  DType dtype = DType::kF32;
};

// The most arguments any accepted callable takes (_rebuild_tensor_v3 with its metadata: 8).
constexpr std::size_t kMaxCallArguments = 8;
// The longest module or class name of a global ('c' reads names up to this long too).
constexpr std::size_t kMaxGlobalNameBytes = 256;

template <std::size_t N>
std::optional<DType> lookup(const std::array<NamedDtype, N>& table, std::string_view name) {
  for (const NamedDtype& e : table)
    if (e.name == name) return e.dtype;
  return std::nullopt;
}

class Machine {
 public:
  Machine(std::span<const std::byte> in, const std::string& path) : in_(in), path_(path) {}

  Result<std::vector<PickledTensor>> run();

 private:
  std::span<const std::byte> in_;
  const std::string& path_;
  std::size_t pos_ = 0;
  std::size_t op_at_ = 0;  // the current opcode's offset, for errors
  std::vector<Object> objects_;
  std::vector<std::uint32_t> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, std::uint32_t> memo_;
  std::vector<RebuiltTensor> tensors_;
  std::uint64_t work_left_ = 0;  // bytes still to copy, hash or compare (set by run())

  Error corrupt(std::string message) const {
    return located(Errc::kCorrupt, "pickle: " + std::move(message), path_, {}, op_at_);
  }
  Error unsupported(std::string message) const {
    return located(Errc::kUnsupported, "pickle: " + std::move(message), path_, {}, op_at_);
  }

  // Spends `bytes` of the work budget: the bytes of a (possibly reused) object that an operation
  // hashes, compares or copies.
  Status charge(std::uint64_t bytes) {
    if (bytes > work_left_)
      return fail(
          unsupported(fmt::format("more copying and hashing than {} bytes of pickle can need (at most {} "
                                  "bytes per byte of pickle, plus {})",
                                  in_.size(), kPickleWorkPerByte, kPickleWorkBaseBytes)));
    work_left_ -= bytes;
    return {};
  }
  // A dict's new items: each key is hashed and compared when the state dict is built, so each
  // setting of a key is charged its bytes (a huge key set a million times is a million charges).
  Status charge_keys(const std::vector<std::uint32_t>& items) {
    for (std::size_t k = 0; k < items.size(); k += 2) QLOAD_TRY(charge(1 + objects_[items[k]].s.size()));
    return {};
  }

  Result<std::span<const std::byte>> take(std::uint64_t n) {
    if (n > in_.size() - pos_) return fail(corrupt(fmt::format("{} bytes wanted, the pickle ends first", n)));
    const auto out = in_.subspan(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return out;
  }
  Result<std::uint64_t> unsigned_le(std::size_t width) {
    QLOAD_ASSIGN_OR_RETURN(const auto b, take(width));
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < width; ++i) v |= std::uint64_t(std::to_integer<std::uint8_t>(b[i])) << (8 * i);
    return v;
  }

  Result<std::uint32_t> add(Object o) {
    if (objects_.size() >= kMaxPickleObjects) return fail(unsupported("more objects than a state dict needs"));
    objects_.push_back(std::move(o));
    return static_cast<std::uint32_t>(objects_.size() - 1);
  }
  Status push_new(Object o) {
    QLOAD_ASSIGN_OR_RETURN(const std::uint32_t id, add(std::move(o)));
    stack_.push_back(id);
    return {};
  }
  Result<std::uint32_t> pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back()))
      return fail(corrupt("pops an empty stack"));
    const std::uint32_t id = stack_.back();
    stack_.pop_back();
    return id;
  }
  // The objects above the last mark, which is removed.
  Result<std::vector<std::uint32_t>> pop_mark() {
    if (marks_.empty()) return fail(corrupt("no mark to pop to"));
    const std::size_t at = marks_.back();
    marks_.pop_back();
    std::vector<std::uint32_t> items(stack_.begin() + static_cast<std::ptrdiff_t>(at), stack_.end());
    stack_.resize(at);
    return items;
  }
  Result<std::uint32_t> top() const {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back()))
      return fail(corrupt("reads an empty stack"));
    return stack_.back();
  }
  // Adds `items` to container `into` (its depth grows with theirs).
  Status extend(std::uint32_t into, const std::vector<std::uint32_t>& items) {
    if (objects_[into].kind == Kind::kTuple && items.size() > kMaxPickleTupleItems)
      return fail(
          unsupported(fmt::format("a tuple of {} items (a state dict's tuples are sizes, strides and call "
                                  "arguments: at most {})",
                                  items.size(), kMaxPickleTupleItems)));
    std::uint32_t depth = objects_[into].depth;
    for (const std::uint32_t i : items) depth = std::max(depth, objects_[i].depth + 1);
    if (depth > kMaxPickleDepth)
      return fail(unsupported(fmt::format("containers nested over {} deep", kMaxPickleDepth)));
    objects_[into].depth = depth;
    objects_[into].items.insert(objects_[into].items.end(), items.begin(), items.end());
    return {};
  }
  Status push_container(Kind kind, const std::vector<std::uint32_t>& items) {
    QLOAD_ASSIGN_OR_RETURN(const std::uint32_t id, add(Object{.kind = kind}));
    QLOAD_TRY(extend(id, items));
    stack_.push_back(id);
    return {};
  }

  Status global(const std::string& module, const std::string& name);
  Status persistent_id();
  Status reduce();
  Status set_items(std::vector<std::uint32_t> items);
  Status step(std::uint8_t op, bool& stop);
  // The families of opcodes step hands on, in its order.
  Status value_op(std::uint8_t op);
  Status container_op(std::uint8_t op);
  Status call_op(std::uint8_t op);
  Result<std::vector<PickledTensor>> state_dict(std::uint32_t root);
  Result<PickledTensor> named_tensor(const std::string& name, const RebuiltTensor& r);

  const Object& at(std::uint32_t id) const { return objects_[id]; }
  Result<std::int64_t> int_arg(std::uint32_t id, std::string_view what) const {
    if (at(id).kind != Kind::kInt) return fail(corrupt(fmt::format("{} is not an int", what)));
    return at(id).i;
  }
};

Status Machine::global(const std::string& module, const std::string& name) {
  if (module.size() > kMaxGlobalNameBytes || name.size() > kMaxGlobalNameBytes)
    return fail(unsupported(fmt::format("a global named by {} and {} bytes (at most {} each)", module.size(),
                                        name.size(), kMaxGlobalNameBytes)));
  std::string full = module + "." + name;
  Object g{.kind = Kind::kGlobal, .s = full};
  if (const auto d = lookup(kStorageTypes, full)) {
    g.dtype = *d;
  } else if (const auto t = lookup(kDtypes, full)) {
    g.dtype = *t;
  } else if (full != kOrderedDict && full != kRebuildV2 && full != kRebuildV3 && full != kRebuildParameter &&
             full != kUntypedStorage) {
    return fail(
        unsupported(fmt::format("refuses global {}: a state dict of tensors never names it (only "
                                "torch.save's own tensor rebuilders, storages, dtypes and OrderedDict load "
                                "without running pickle)",
                                quote_name(full))));
  }
  return push_new(std::move(g));
}

// ('storage', storage type, key, location, numel): a storage of the archive.
Status Machine::persistent_id() {
  QLOAD_ASSIGN_OR_RETURN(const std::uint32_t pid, pop());
  const Object& t = at(pid);
  if (t.kind != Kind::kTuple || t.items.size() != 5 || at(t.items[0]).kind != Kind::kString ||
      at(t.items[0]).s != "storage")
    return fail(corrupt("a persistent id that is not ('storage', type, key, location, numel)"));
  const Object& type = at(t.items[1]);
  const Object& key = at(t.items[2]);
  if (type.kind != Kind::kGlobal || (!lookup(kStorageTypes, type.s) && type.s != kUntypedStorage))
    return fail(corrupt("a persistent id whose storage type is not a storage class"));
  if (key.kind != Kind::kString) return fail(corrupt("a persistent id whose key is not a string"));
  QLOAD_ASSIGN_OR_RETURN(const std::int64_t numel, int_arg(t.items[4], "a storage's element count"));
  const std::uint64_t element = type.s == kUntypedStorage ? 1 : dtype_info(type.dtype).block_bytes;
  if (numel < 0 || static_cast<std::uint64_t>(numel) > (std::uint64_t{1} << 62) / element)
    return fail(corrupt(fmt::format("a storage of {} elements", numel)));
  return push_new(Object{.kind = Kind::kStorage,
                         .i = t.items[2],  // the key by id: a reused multi-megabyte key is not copied here
                         .dtype = type.s == kUntypedStorage ? DType::kU8 : type.dtype,
                         .bytes = static_cast<std::uint64_t>(numel) * element});
}

Status Machine::reduce() {
  QLOAD_ASSIGN_OR_RETURN(const std::uint32_t args_id, pop());
  QLOAD_ASSIGN_OR_RETURN(const std::uint32_t fn_id, pop());
  if (at(fn_id).kind != Kind::kGlobal || at(args_id).kind != Kind::kTuple)
    return fail(corrupt("REDUCE of a non-callable"));
  if (at(args_id).items.size() > kMaxCallArguments)
    return fail(corrupt(fmt::format("REDUCE with {} arguments", at(args_id).items.size())));
  // Copies (at most kMaxCallArguments ids, and the name): push_new may move the arena.
  const std::vector<std::uint32_t> a = at(args_id).items;
  const std::string fn = at(fn_id).s;
  if (fn == kOrderedDict) {
    if (!a.empty()) return fail(unsupported("OrderedDict built from arguments"));
    return push_new(Object{.kind = Kind::kDict});
  }
  if (fn == kRebuildParameter) {  // (tensor, requires_grad, backward_hooks): the tensor
    if (a.size() < 1 || at(a[0]).kind != Kind::kTensor) return fail(corrupt("_rebuild_parameter of a non-tensor"));
    stack_.push_back(a[0]);
    return {};
  }
  const bool v3 = fn == kRebuildV3;
  if (fn != kRebuildV2 && !v3)
    return fail(unsupported(fmt::format("calls {}, which is not a tensor rebuilder", quote_name(fn))));
  // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, dtype (v3)][, metadata])
  if (a.size() < (v3 ? 7u : 6u) || at(a[0]).kind != Kind::kStorage || at(a[2]).kind != Kind::kTuple ||
      at(a[3]).kind != Kind::kTuple || at(a[2]).items.size() != at(a[3]).items.size())
    return fail(corrupt(fmt::format("{} with arguments that do not describe a tensor", fn)));
  RebuiltTensor t{.storage = a[0], .size = a[2], .stride = a[3], .dtype = at(a[0]).dtype};
  if (v3) {
    if (at(a[6]).kind != Kind::kGlobal || !lookup(kDtypes, at(a[6]).s))
      return fail(corrupt("_rebuild_tensor_v3 without a dtype"));
    t.dtype = at(a[6]).dtype;
  }
  QLOAD_ASSIGN_OR_RETURN(const std::int64_t offset, int_arg(a[1], "a storage offset"));
  if (offset < 0) return fail(corrupt("a negative storage offset"));
  t.storage_offset = static_cast<std::uint64_t>(offset);
  tensors_.push_back(t);
  return push_new(Object{.kind = Kind::kTensor, .i = static_cast<std::int64_t>(tensors_.size() - 1)});
}

Status Machine::set_items(std::vector<std::uint32_t> items) {
  QLOAD_ASSIGN_OR_RETURN(const std::uint32_t dict, top());
  if (at(dict).kind != Kind::kDict) return fail(corrupt("SETITEMS on a non-dict"));
  if (items.size() % 2 != 0) return fail(corrupt("SETITEMS with a key and no value"));
  QLOAD_TRY(charge_keys(items));
  return extend(dict, items);
}

// One opcode. Protocol, framing, STOP, marks and the memo are handled here; any other opcode
// goes down the families (values, containers, then globals and calls, which refuse the rest).
Status Machine::step(std::uint8_t op, bool& stop) {
  switch (op) {
    case 0x80: {  // PROTO
      QLOAD_ASSIGN_OR_RETURN(const std::uint64_t v, unsigned_le(1));
      if (v < 2 || v > 5) return fail(unsupported(fmt::format("pickle protocol {}", v)));
      return {};
    }
    case 0x95: {  // FRAME: a length hint
      QLOAD_ASSIGN_OR_RETURN(const auto frame, take(8));
      static_cast<void>(frame);
      return {};
    }
    case '.': stop = true; return {};
    case '(':
      if (marks_.size() >= kMaxPickleObjects) return fail(unsupported("more marks than a state dict needs"));
      marks_.push_back(stack_.size());
      return {};
    case 'q':
    case 'r':
    case 0x94: {  // BINPUT, LONG_BINPUT, MEMOIZE
      std::uint64_t index = memo_.size();
      if (op != 0x94) {
        QLOAD_ASSIGN_OR_RETURN(index, unsigned_le(op == 'q' ? 1 : 4));
      }
      QLOAD_ASSIGN_OR_RETURN(const std::uint32_t id, top());
      if (memo_.size() >= kMaxPickleObjects && !memo_.contains(index))
        return fail(unsupported("more memo entries than a state dict needs"));
      memo_[index] = id;
      return {};
    }
    case 'h':
    case 'j': {  // BINGET, LONG_BINGET
      QLOAD_ASSIGN_OR_RETURN(const std::uint64_t index, unsigned_le(op == 'h' ? 1 : 4));
      const auto it = memo_.find(index);
      if (it == memo_.end()) return fail(corrupt(fmt::format("memo entry {} was never stored", index)));
      if (stack_.size() >= kMaxPickleObjects) return fail(unsupported("a deeper stack than a state dict needs"));
      stack_.push_back(it->second);
      return {};
    }
    default: return value_op(op);
  }
}

// None, bools, ints, floats and strings.
Status Machine::value_op(std::uint8_t op) {
  switch (op) {
    case 'J': {
      QLOAD_ASSIGN_OR_RETURN(const std::uint64_t v, unsigned_le(4));
      return push_new(Object{.kind = Kind::kInt, .i = static_cast<std::int32_t>(static_cast<std::uint32_t>(v))});
    }
    case 'K':
    case 'M': {
      QLOAD_ASSIGN_OR_RETURN(const std::uint64_t v, unsigned_le(op == 'K' ? 1 : 2));
      return push_new(Object{.kind = Kind::kInt, .i = static_cast<std::int64_t>(v)});
    }
    case 0x8a: {  // LONG1: n bytes, two's complement little endian
      QLOAD_ASSIGN_OR_RETURN(const std::uint64_t n, unsigned_le(1));
      if (n > 8) return fail(unsupported(fmt::format("an integer of {} bytes", n)));
      QLOAD_ASSIGN_OR_RETURN(std::uint64_t v, unsigned_le(static_cast<std::size_t>(n)));
      if (n > 0 && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~std::uint64_t{0} << (8 * n);  // sign-extend
      return push_new(Object{.kind = Kind::kInt, .i = static_cast<std::int64_t>(v)});
    }
    case 'N': return push_new(Object{.kind = Kind::kNone});
    case 0x88:
    case 0x89: return push_new(Object{.kind = Kind::kBool, .i = op == 0x88 ? 1 : 0});
    case 'G': {  // BINFLOAT: big endian
      QLOAD_ASSIGN_OR_RETURN(const auto b, take(8));
      std::uint64_t v = 0;
      for (std::size_t i = 0; i < 8; ++i) v = (v << 8) | std::to_integer<std::uint8_t>(b[i]);
      return push_new(Object{.kind = Kind::kFloat, .f = std::bit_cast<double>(v)});
    }
    case 'X':
    case 0x8c:
    case 0x8d: {  // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
      QLOAD_ASSIGN_OR_RETURN(const std::uint64_t n, unsigned_le(op == 'X' ? 4 : op == 0x8c ? 1 : 8));
      QLOAD_ASSIGN_OR_RETURN(const auto b, take(n));
      return push_new(
          Object{.kind = Kind::kString, .s = std::string(reinterpret_cast<const char*>(b.data()), b.size())});
    }
    default: return container_op(op);
  }
}

// Builds a container (empty, or of the items above the mark or on the stack) or adds to the one
// on top of the stack.
Status Machine::container_op(std::uint8_t op) {
  switch (op) {
    case '}': return push_new(Object{.kind = Kind::kDict});
    case ']': return push_new(Object{.kind = Kind::kList});
    case ')': return push_new(Object{.kind = Kind::kTuple});
    case 't': {
      QLOAD_ASSIGN_OR_RETURN(auto items, pop_mark());
      return push_container(Kind::kTuple, items);
    }
    case 'l': {
      QLOAD_ASSIGN_OR_RETURN(auto items, pop_mark());
      return push_container(Kind::kList, items);
    }
    case 'd': {
      QLOAD_ASSIGN_OR_RETURN(auto items, pop_mark());
      if (items.size() % 2 != 0) return fail(corrupt("DICT with a key and no value"));
      QLOAD_TRY(charge_keys(items));
      return push_container(Kind::kDict, items);
    }
    case 0x85:
    case 0x86:
    case 0x87: {  // TUPLE1..3
      std::vector<std::uint32_t> items(op - 0x84u);
      for (std::size_t i = items.size(); i-- > 0;) {
        QLOAD_ASSIGN_OR_RETURN(items[i], pop());
      }
      return push_container(Kind::kTuple, items);
    }
    case 's': {
      QLOAD_ASSIGN_OR_RETURN(const std::uint32_t value, pop());
      QLOAD_ASSIGN_OR_RETURN(const std::uint32_t key, pop());
      return set_items({key, value});
    }
    case 'u': {
      QLOAD_ASSIGN_OR_RETURN(auto items, pop_mark());
      return set_items(std::move(items));
    }
    case 'a':
    case 'e': {  // APPEND, APPENDS
      std::vector<std::uint32_t> items;
      if (op == 'a') {
        QLOAD_ASSIGN_OR_RETURN(const std::uint32_t v, pop());
        items.push_back(v);
      } else {
        QLOAD_ASSIGN_OR_RETURN(items, pop_mark());
      }
      QLOAD_ASSIGN_OR_RETURN(const std::uint32_t list, top());
      if (at(list).kind != Kind::kList) return fail(corrupt("APPEND to a non-list"));
      return extend(list, items);
    }
    case 'b': {  // BUILD: an OrderedDict's `_metadata`, a parameter's state: nothing a load needs
      QLOAD_ASSIGN_OR_RETURN(const std::uint32_t state, pop());
      static_cast<void>(state);
      QLOAD_ASSIGN_OR_RETURN(const std::uint32_t target, top());
      if (at(target).kind != Kind::kDict && at(target).kind != Kind::kTensor)
        return fail(corrupt("BUILD on an object that is neither a dict nor a tensor"));
      return {};
    }
    default: return call_op(op);
  }
}

// Globals (GLOBAL, STACK_GLOBAL), persistent ids and REDUCE: the last family, which refuses
// every opcode no family knows.
Status Machine::call_op(std::uint8_t op) {
  switch (op) {
    case 'c': {  // GLOBAL: "module\nname\n"
      std::string parts[2];
      for (std::string& part : parts) {
        const std::size_t end = [&] {
          for (std::size_t i = pos_; i < in_.size() && i - pos_ < 256; ++i)
            if (std::to_integer<char>(in_[i]) == '\n') return i;
          return std::string::npos;
        }();
        if (end == std::string::npos) return fail(corrupt("GLOBAL without a newline-terminated name"));
        part.assign(reinterpret_cast<const char*>(in_.data() + pos_), end - pos_);
        pos_ = end + 1;
      }
      return global(parts[0], parts[1]);
    }
    case 0x93: {  // STACK_GLOBAL
      QLOAD_ASSIGN_OR_RETURN(const std::uint32_t name, pop());
      QLOAD_ASSIGN_OR_RETURN(const std::uint32_t module, pop());
      if (at(name).kind != Kind::kString || at(module).kind != Kind::kString)
        return fail(corrupt("STACK_GLOBAL of non-strings"));
      return global(at(module).s, at(name).s);
    }
    case 'Q': return persistent_id();
    case 'R': return reduce();
    default: return fail(unsupported(fmt::format("opcode 0x{:02x}, which state dicts do not use", op)));
  }
}

// A tensor the state dict names: its sizes and strides (at most torch's 64 dims) and storage
// key copied out of the pickle's objects, each copy charged.
Result<PickledTensor> Machine::named_tensor(const std::string& name, const RebuiltTensor& r) {
  const std::vector<std::uint32_t>& size = at(r.size).items;
  const std::vector<std::uint32_t>& stride = at(r.stride).items;
  const auto refuse = [&](Errc code, std::string message) {
    return fail(located(code, "pickle: " + std::move(message), path_, name));
  };
  if (size.size() > kMaxTensorDims)
    return refuse(Errc::kCorrupt,
                  fmt::format("a tensor of {} dimensions (torch allows at most {})", size.size(), kMaxTensorDims));
  const std::string& key = at(at(r.storage).i).s;
  QLOAD_TRY(charge(name.size() + key.size() + 16 * size.size()));
  PickledTensor t{.name = name,
                  .storage_key = key,
                  .dtype = r.dtype,
                  .storage_bytes = at(r.storage).bytes,
                  .storage_offset = r.storage_offset};
  for (std::size_t d = 0; d < size.size(); ++d) {
    if (at(size[d]).kind != Kind::kInt || at(stride[d]).kind != Kind::kInt)
      return refuse(Errc::kCorrupt, "a size or stride that is not an int");
    if (at(size[d]).i < 0) return refuse(Errc::kCorrupt, "a negative size");
    t.size.push_back(static_cast<std::uint64_t>(at(size[d]).i));
    t.stride.push_back(at(stride[d]).i);
  }
  return t;
}

Result<std::vector<PickledTensor>> Machine::state_dict(std::uint32_t root) {
  const Object& dict = at(root);
  if (dict.kind != Kind::kDict)
    return fail(
        unsupported("the pickle holds something other than a dict of tensors (a whole model or a training "
                    "checkpoint: save its state_dict())"));
  // Each name's last value, as in Python, by id: hashing the keys was charged as they were set,
  // and nothing is copied until each name's final tensor is known.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> slots;  // key, tensor
  std::unordered_map<std::string_view, std::size_t> seen;
  for (std::size_t i = 0; i + 1 < dict.items.size(); i += 2) {
    const Object& key = at(dict.items[i]);
    const Object& value = at(dict.items[i + 1]);
    if (key.kind != Kind::kString) return fail(unsupported("a state dict key that is not a string"));
    if (value.kind != Kind::kTensor)
      return fail(located(Errc::kUnsupported, "pickle: the state dict's value is not a tensor", path_, key.s));
    const auto [it, fresh] = seen.emplace(key.s, slots.size());
    if (fresh)
      slots.emplace_back(dict.items[i], dict.items[i + 1]);
    else
      slots[it->second].second = dict.items[i + 1];
  }
  std::vector<PickledTensor> out;
  out.reserve(slots.size());
  for (const auto& [key, value] : slots) {
    QLOAD_ASSIGN_OR_RETURN(PickledTensor t, named_tensor(at(key).s, tensors_[static_cast<std::size_t>(at(value).i)]));
    out.push_back(std::move(t));
  }
  return out;
}

Result<std::vector<PickledTensor>> Machine::run() {
  if (in_.size() > kMaxPickleBytes)
    return fail(located(Errc::kUnsupported, fmt::format("a pickle of {} bytes", in_.size()), path_));
  work_left_ = kPickleWorkPerByte * in_.size() + kPickleWorkBaseBytes;  // in_.size() <= 2^30: no overflow
  bool stop = false;
  while (!stop) {
    if (pos_ >= in_.size()) return fail(corrupt("the pickle ends without STOP"));
    op_at_ = pos_;
    const auto op = std::to_integer<std::uint8_t>(in_[pos_++]);
    QLOAD_TRY(step(op, stop));
  }
  QLOAD_ASSIGN_OR_RETURN(const std::uint32_t root, pop());
  return state_dict(root);
}

}  // namespace

Result<std::vector<PickledTensor>> read_state_dict_pickle(std::span<const std::byte> pickle, const std::string& path) {
  Machine m(pickle, path);
  return m.run();
}

}  // namespace qload::formats
