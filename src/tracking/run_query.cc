#include "tracking/run_query.h"

#include <xxhash.h>

#include <bit>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace kv0::tracking::query {
namespace {

struct AttributeName {
  std::string_view name;
  Attribute attribute;
};
// MLflow's names for the same attributes are accepted too.
constexpr AttributeName kAttributes[] = {
    {"run_id", Attribute::kRunId},
    {"name", Attribute::kName},
    {"run_name", Attribute::kName},
    {"experiment", Attribute::kExperiment},
    {"description", Attribute::kDescription},
    {"status", Attribute::kStatus},
    {"kind", Attribute::kKind},
    {"archived", Attribute::kArchived},
    {"created_at", Attribute::kCreatedAt},
    {"start_time", Attribute::kCreatedAt},
    {"updated_at", Attribute::kUpdatedAt},
    {"ended_at", Attribute::kEndedAt},
    {"end_time", Attribute::kEndedAt},
};

struct StatName {
  std::string_view name;
  Stat stat;
};
constexpr StatName kStats[] = {
    {"last", Stat::kLast},
    {"min", Stat::kMin},
    {"max", Stat::kMax},
    {"count", Stat::kCount},
    {"first_step", Stat::kFirstStep},
    {"last_step", Stat::kLastStep},
    {"min_step", Stat::kMinStep},
    {"max_step", Stat::kMaxStep},
    {"non_finite", Stat::kNonFinite},
};

std::string_view AttributeText(Attribute a) {
  for (const auto& [name, attribute] : kAttributes) {
    if (attribute == a) return name;  // the first name listed is kv0's own
  }
  return "?";
}

std::string_view StatText(Stat s) {
  for (const auto& [name, stat] : kStats) {
    if (stat == s) return name;
  }
  return "?";
}

std::optional<Stat> StatNamed(std::string_view text) {
  for (const auto& [name, stat] : kStats) {
    if (name == text) return stat;
  }
  return std::nullopt;
}

bool IsTimeAttribute(Attribute a) {
  return a == Attribute::kCreatedAt || a == Attribute::kUpdatedAt || a == Attribute::kEndedAt;
}

// The kind of literal a term compares with; kMissing when any kind does.
Value::Kind LiteralKindOf(const Term& term) {
  switch (term.kind) {
    case Term::Kind::kParam:
      return Value::Kind::kMissing;
    case Term::Kind::kMetric:
      return Value::Kind::kNumber;
    case Term::Kind::kAttribute:
      if (term.attribute == Attribute::kArchived) return Value::Kind::kFlag;
      return IsTimeAttribute(term.attribute) ? Value::Kind::kNumber : Value::Kind::kText;
  }
  return Value::Kind::kMissing;
}

std::string_view KindText(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::kNumber:
      return "a number";
    case Value::Kind::kText:
      return "a quoted string";
    case Value::Kind::kFlag:
      return "true or false";
    case Value::Kind::kMissing:
      break;
  }
  return "a value";
}

bool IsNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '/' ||
         c == ':';
}

bool IsWordChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// SQL LIKE: % matches any run of characters, _ one character (a UTF-8 code
// point). Backtracks to the last %, so it is linear in practice.
bool Like(std::string_view text, std::string_view pattern, bool fold_case) {
  auto same = [fold_case](char a, char b) {
    if (!fold_case) return a == b;
    return std::tolower(static_cast<unsigned char>(a)) ==
           std::tolower(static_cast<unsigned char>(b));
  };
  auto skip_char = [](std::string_view s, size_t i) {
    ++i;
    while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
    return i;
  };
  size_t t = 0, p = 0;
  size_t star_p = std::string_view::npos, star_t = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '%') {
      star_p = ++p;
      star_t = t;
    } else if (p < pattern.size() && pattern[p] == '_') {
      t = skip_char(text, t);
      ++p;
    } else if (p < pattern.size() && same(pattern[p], text[t])) {
      ++t;
      ++p;
    } else if (star_p != std::string_view::npos) {
      p = star_p;
      t = star_t = skip_char(text, star_t);
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '%') ++p;
  return p == pattern.size();
}

bool Equal(const Value& v, const Value& literal) {
  if (v.kind != literal.kind || v.missing()) return false;
  switch (v.kind) {
    case Value::Kind::kNumber:
      return v.number == literal.number;
    case Value::Kind::kText:
      return v.text == literal.text;
    case Value::Kind::kFlag:
      return v.flag == literal.flag;
    case Value::Kind::kMissing:
      break;
  }
  return false;
}

// -1, 0, 1 for two values of one kind (numbers and text; flags false < true).
int CompareSameKind(const Value& a, const Value& b) {
  switch (a.kind) {
    case Value::Kind::kNumber:
      return a.number < b.number ? -1 : a.number > b.number ? 1 : 0;
    case Value::Kind::kText: {
      int c = a.text.compare(b.text);
      return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    case Value::Kind::kFlag:
      return int(a.flag) - int(b.flag);
    case Value::Kind::kMissing:
      break;
  }
  return 0;
}

std::string Hex(std::string_view bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::optional<std::string> Unhex(std::string_view hex) {
  if (hex.size() % 2) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    int v = 0;
    for (char c : hex.substr(i, 2)) {
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return std::nullopt;
      v = v * 16 + d;
    }
    out += static_cast<char>(v);
  }
  return out;
}

// The page token's parts, as JSON; hex-encoded so that it travels in URLs.
nlohmann::json EncodeValue(const Value& v) {
  if (v.missing()) return nullptr;
  switch (v.kind) {
    case Value::Kind::kNumber: {
      char bits[17];
      std::snprintf(bits, sizeof(bits), "%016llx",
                    static_cast<unsigned long long>(std::bit_cast<uint64_t>(v.number)));
      return std::string("n") + bits;
    }
    case Value::Kind::kText:
      return "t" + Hex(v.text);
    case Value::Kind::kFlag:
      return v.flag;
    case Value::Kind::kMissing:
      break;
  }
  return nullptr;
}

std::optional<Value> DecodeValue(const nlohmann::json& j) {
  if (j.is_null()) return Value{};
  if (j.is_boolean()) return Value::Flag(j.get<bool>());
  if (!j.is_string()) return std::nullopt;
  const std::string& s = j.get_ref<const std::string&>();
  if (s.starts_with("t")) {
    auto text = Unhex(std::string_view(s).substr(1));
    if (!text) return std::nullopt;
    return Value::Text(std::move(*text));
  }
  if (s.size() != 17 || s[0] != 'n') return std::nullopt;
  char* end = nullptr;
  unsigned long long bits = std::strtoull(s.c_str() + 1, &end, 16);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return Value::Number(std::bit_cast<double>(static_cast<uint64_t>(bits)));
}

[[noreturn]] void BadToken(std::string_view why) {
  throw Error(Code::kInvalidArgument, "page_token: " + std::string(why));
}

// A recursive-descent parser over one string of the query (the filter, one
// order_by entry or one column). Positions in errors are 1-based.
class Parser {
 public:
  Parser(std::string_view text, std::string part, std::vector<Term>* terms)
      : text_(text), part_(std::move(part)), terms_(terms) {}

  Expr Filter() {
    SkipSpace();
    if (AtEnd()) return Expr{};
    Expr e = Or();
    ExpectEnd("AND, OR or the end of the filter");
    return e;
  }

  void Order(std::vector<OrderTerm>* out) {
    do {
      OrderTerm o;
      o.term = TermHere();
      if (AcceptWord("DESC")) {
        o.descending = true;
      } else {
        AcceptWord("ASC");
      }
      out->push_back(o);
    } while (Accept(','));
    ExpectEnd("ASC, DESC, a comma or the end");
  }

  size_t Column() {
    size_t at = Position();
    size_t term = TermHere();
    if ((*terms_)[term].kind == Term::Kind::kAttribute) {
      Fail(at, "a params. or metrics. term (run attributes are always returned)");
    }
    ExpectEnd("the end of the column");
    return term;
  }

 private:
  [[noreturn]] void Fail(size_t at, std::string_view expected) {
    std::string found = at >= text_.size() ? "the end" : "'" + std::string(Snippet(at)) + "'";
    throw Error(Code::kInvalidArgument, part_ + ": at " + std::to_string(at + 1) + ": expected " +
                                            std::string(expected) + ", found " + found);
  }
  std::string_view Snippet(size_t at) const { return text_.substr(at, 12); }

  size_t Position() {
    SkipSpace();
    return pos_;
  }
  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool AtEnd() { return Position() >= text_.size(); }
  bool Accept(char c) {
    if (Position() < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Accept(std::string_view s) {
    if (text_.substr(Position()).starts_with(s)) {
      pos_ += s.size();
      return true;
    }
    return false;
  }
  void Expect(char c, std::string_view what) {
    if (!Accept(c)) Fail(pos_, what);
  }
  void ExpectEnd(std::string_view what) {
    if (!AtEnd()) Fail(pos_, what);
  }
  // A keyword, in any case, not followed by a word character.
  bool AcceptWord(std::string_view word) {
    size_t at = Position();
    if (text_.size() - at < word.size()) return false;
    for (size_t i = 0; i < word.size(); ++i) {
      if (std::toupper(static_cast<unsigned char>(text_[at + i])) != word[i]) return false;
    }
    if (at + word.size() < text_.size() && IsWordChar(text_[at + word.size()])) return false;
    pos_ = at + word.size();
    return true;
  }

  Expr Or() {
    Expr first = And();
    if (!IsWordAhead("OR")) return first;
    Expr e;
    e.kind = Expr::Kind::kOr;
    e.children.push_back(std::move(first));
    while (AcceptWord("OR")) e.children.push_back(And());
    return e;
  }
  Expr And() {
    Expr first = Not();
    if (!IsWordAhead("AND")) return first;
    Expr e;
    e.kind = Expr::Kind::kAnd;
    e.children.push_back(std::move(first));
    while (AcceptWord("AND")) e.children.push_back(Not());
    return e;
  }
  bool IsWordAhead(std::string_view word) {
    size_t at = pos_;
    bool yes = AcceptWord(word);
    pos_ = at;
    return yes;
  }
  Expr Not() {
    if (AcceptWord("NOT")) {
      Expr e;
      e.kind = Expr::Kind::kNot;
      e.children.push_back(Not());
      return e;
    }
    if (Accept('(')) {
      Expr e = Or();
      Expect(')', "AND, OR or ')'");
      return e;
    }
    return Comparison();
  }

  Expr Comparison() {
    Expr e;
    e.kind = Expr::Kind::kCompare;
    e.term = TermHere();
    const Term& term = (*terms_)[e.term];
    size_t at = Position();
    if (Accept("==") || Accept('=')) {
      e.op = Op::kEq;
    } else if (Accept("!=") || Accept("<>")) {
      e.op = Op::kNe;
    } else if (Accept("<=")) {
      e.op = Op::kLe;
    } else if (Accept(">=")) {
      e.op = Op::kGe;
    } else if (Accept('<')) {
      e.op = Op::kLt;
    } else if (Accept('>')) {
      e.op = Op::kGt;
    } else if (AcceptWord("IS")) {
      e.op = AcceptWord("NOT") ? Op::kIsNotNull : Op::kIsNull;
      if (!AcceptWord("NULL")) Fail(pos_, "NULL");
      return e;
    } else {
      bool negated = AcceptWord("NOT");
      if (AcceptWord("LIKE")) {
        e.op = negated ? Op::kNotLike : Op::kLike;
      } else if (AcceptWord("ILIKE")) {
        e.op = negated ? Op::kNotILike : Op::kILike;
      } else if (AcceptWord("IN")) {
        e.op = negated ? Op::kNotIn : Op::kIn;
      } else {
        Fail(pos_, negated ? "LIKE, ILIKE or IN after NOT"
                           : "a comparison (= != < <= > >= LIKE ILIKE IN NOT IS)");
      }
    }
    bool list = e.op == Op::kIn || e.op == Op::kNotIn;
    if (list) Expect('(', "'(' and a list of values");
    do {
      size_t literal_at = Position();
      Value v = Literal();
      CheckLiteral(term, e.op, v, literal_at);
      e.literals.push_back(std::move(v));
    } while (list && Accept(','));
    if (list) Expect(')', "',' or ')' closing the list");
    (void)at;
    return e;
  }

  void CheckLiteral(const Term& term, Op op, const Value& v, size_t at) {
    bool like = op == Op::kLike || op == Op::kILike || op == Op::kNotLike || op == Op::kNotILike;
    Value::Kind wanted = like ? Value::Kind::kText : LiteralKindOf(term);
    if (like && LiteralKindOf(term) != Value::Kind::kMissing &&
        LiteralKindOf(term) != Value::Kind::kText) {
      Fail(at, std::string(term.ColumnName()) + " to compare with = != < <= > >= or IN, not LIKE");
    }
    if (wanted != Value::Kind::kMissing && v.kind != wanted) {
      Fail(at, std::string(KindText(wanted)) + " to compare " + term.ColumnName() + " with");
    }
    bool ordering = op == Op::kLt || op == Op::kLe || op == Op::kGt || op == Op::kGe;
    if (ordering && v.kind == Value::Kind::kFlag) {
      Fail(at, "a number or a string: true and false compare with = != and IN only");
    }
  }

  Value Literal() {
    size_t at = Position();
    if (at < text_.size() && (text_[at] == '\'' || text_[at] == '"')) return Value::Text(Quoted());
    if (AcceptWord("TRUE")) return Value::Flag(true);
    if (AcceptWord("FALSE")) return Value::Flag(false);
    if (auto n = Number()) return Value::Number(*n);
    Fail(at, "a value: a quoted string, a number, true or false");
  }

  std::optional<double> Number() {
    size_t at = Position(), i = at;
    if (i < text_.size() && (text_[i] == '-' || text_[i] == '+')) ++i;
    size_t digits = 0;
    while (i < text_.size() && std::isdigit(static_cast<unsigned char>(text_[i]))) ++i, ++digits;
    if (i < text_.size() && text_[i] == '.') {
      ++i;
      while (i < text_.size() && std::isdigit(static_cast<unsigned char>(text_[i]))) ++i, ++digits;
    }
    if (digits == 0) return std::nullopt;
    if (i < text_.size() && (text_[i] == 'e' || text_[i] == 'E')) {
      size_t e = i + 1;
      if (e < text_.size() && (text_[e] == '-' || text_[e] == '+')) ++e;
      size_t exp_digits = 0;
      while (e < text_.size() && std::isdigit(static_cast<unsigned char>(text_[e])))
        ++e, ++exp_digits;
      if (exp_digits == 0) Fail(e, "the exponent's digits");
      i = e;
    }
    if (i < text_.size() && IsWordChar(text_[i]))
      Fail(i, "a space or an operator after the number");
    std::string s(text_.substr(at, i - at));
    double v = std::strtod(s.c_str(), nullptr);
    if (!std::isfinite(v)) Fail(at, "a number within the range of a double");
    pos_ = i;
    return v;
  }

  // A string in single or double quotes; the quote doubled stands for itself.
  std::string Quoted() {
    size_t at = Position();
    char quote = text_[pos_++];
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) Fail(at, std::string("a closing ") + quote);
      char c = text_[pos_++];
      if (c == quote) {
        if (pos_ < text_.size() && text_[pos_] == quote) {
          out += quote;
          ++pos_;
          continue;
        }
        return out;
      }
      out += c;
    }
  }

  // One segment of a name: unquoted name characters, or `backquoted` (a
  // doubled backquote stands for itself). Sets *quoted.
  std::string Segment(bool* quoted) {
    size_t at = Position();
    if (Accept('`')) {
      *quoted = true;
      std::string out;
      while (true) {
        if (pos_ >= text_.size()) Fail(at, "a closing `");
        char c = text_[pos_++];
        if (c == '`') {
          if (pos_ < text_.size() && text_[pos_] == '`') {
            out += '`';
            ++pos_;
            continue;
          }
          if (out.empty()) Fail(at, "a name inside the backquotes");
          return out;
        }
        out += c;
      }
    }
    *quoted = false;
    size_t end = pos_;
    while (end < text_.size() && IsNameChar(text_[end])) ++end;
    if (end == pos_) Fail(pos_, "a name (letters, digits, _ - / :) or a `quoted name`");
    std::string out(text_.substr(pos_, end - pos_));
    pos_ = end;
    return out;
  }

  // Segments joined by dots, without spaces between them.
  std::vector<std::pair<std::string, bool>> DottedName() {
    std::vector<std::pair<std::string, bool>> parts;
    do {
      bool quoted = false;
      std::string s = Segment(&quoted);
      parts.emplace_back(std::move(s), quoted);
    } while (pos_ < text_.size() && text_[pos_] == '.' && ++pos_);
    return parts;
  }

  // Reads a term and returns its index in terms_, adding it if new.
  size_t TermHere() {
    size_t at = Position();
    size_t end = at;
    while (end < text_.size() && IsWordChar(text_[end])) ++end;
    std::string word(text_.substr(at, end - at));
    for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    char next = end < text_.size() ? text_[end] : '\0';
    Term term;
    if ((word == "params" || word == "param") && next == '.') {
      pos_ = end + 1;
      term.kind = Term::Kind::kParam;
      for (auto& [part, quoted] : DottedName()) {
        term.key += (term.key.empty() ? "" : ".") + part;
      }
    } else if ((word == "metrics" || word == "metric") && (next == '.' || next == '[')) {
      pos_ = end + 1;
      term.kind = Term::Kind::kMetric;
      if (next == '.') {
        auto parts = DottedName();
        if (parts.size() > 1 && !parts.back().second) {
          if (auto stat = StatNamed(parts.back().first)) {
            term.stat = *stat;
            parts.pop_back();
          }
        }
        for (auto& [part, quoted] : parts) term.key += (term.key.empty() ? "" : ".") + part;
      } else {
        size_t name_at = Position();
        if (name_at >= text_.size() || (text_[name_at] != '\'' && text_[name_at] != '"')) {
          Fail(name_at, "the metric's name as a quoted string");
        }
        term.key = Quoted();
        if (term.key.empty()) Fail(name_at, "a metric name that is not empty");
        if (Accept(',')) {
          size_t ctx_at = Position();
          term.context = JsonValue();
          if (!term.context.is_object()) Fail(ctx_at, "the context as an object {'key': value}");
        }
        Expect(']', "']' (or ', {context}' before it)");
        if (pos_ < text_.size() && text_[pos_] == '.') {
          ++pos_;
          size_t stat_at = pos_;
          bool quoted = false;
          std::string s = Segment(&quoted);
          auto stat = StatNamed(s);
          if (!stat || quoted) Fail(stat_at, StatList());
          term.stat = *stat;
        }
      }
    } else {
      if ((word == "attributes" || word == "attribute" || word == "attr") && next == '.') {
        at = end + 1;
        end = at;
        while (end < text_.size() && IsWordChar(text_[end])) ++end;
        word = std::string(text_.substr(at, end - at));
      }
      bool known = false;
      for (const auto& [name, attribute] : kAttributes) {
        if (name == word) {
          term.attribute = attribute;
          known = true;
        }
      }
      if (!known) {
        Fail(at, word.empty() ? "a term: params.<key>, metrics.<name> or an attribute"
                              : "params.<key>, metrics.<name> or a known attribute (run_id, "
                                "name, experiment, description, status, kind, archived, "
                                "created_at, updated_at, ended_at), not the unknown '" +
                                    word + "'");
      }
      pos_ = end;
    }
    for (size_t i = 0; i < terms_->size(); ++i) {
      if ((*terms_)[i] == term) return i;
    }
    terms_->push_back(std::move(term));
    return terms_->size() - 1;
  }

  static std::string StatList() {
    std::string out = "a statistic (";
    for (size_t i = 0; i < std::size(kStats); ++i) {
      out += (i ? ", " : "") + std::string(kStats[i].name);
    }
    return out + ")";
  }

  // A context value: JSON, with strings in single or double quotes.
  nlohmann::json JsonValue() {
    size_t at = Position();
    if (Accept('{')) {
      nlohmann::json object = nlohmann::json::object();
      if (Accept('}')) return object;
      do {
        size_t key_at = Position();
        if (key_at >= text_.size() || (text_[key_at] != '\'' && text_[key_at] != '"')) {
          Fail(key_at, "a quoted key");
        }
        std::string key = Quoted();
        Expect(':', "':' after the key");
        object[key] = JsonValue();
      } while (Accept(','));
      Expect('}', "',' or '}'");
      return object;
    }
    if (Accept('[')) {
      nlohmann::json array = nlohmann::json::array();
      if (Accept(']')) return array;
      do array.push_back(JsonValue());
      while (Accept(','));
      Expect(']', "',' or ']'");
      return array;
    }
    if (at < text_.size() && (text_[at] == '\'' || text_[at] == '"')) return Quoted();
    if (AcceptWord("TRUE")) return true;
    if (AcceptWord("FALSE")) return false;
    if (AcceptWord("NULL") || AcceptWord("NONE")) return nullptr;
    size_t number_at = Position();
    if (Number()) {
      // Integers stay integers, as a context given from code holds them.
      auto parsed =
          nlohmann::json::parse(text_.substr(number_at, pos_ - number_at), nullptr, false);
      if (!parsed.is_discarded()) return parsed;
      return std::strtod(std::string(text_.substr(number_at, pos_ - number_at)).c_str(), nullptr);
    }
    Fail(at, "a context value");
  }

  std::string_view text_;
  std::string part_;
  std::vector<Term>* terms_;
  size_t pos_ = 0;
};

uint64_t Fingerprint(const RunQuery& query) {
  std::string all = query.filter;
  for (const auto& o : query.order_by) all += '\0' + o;
  return XXH3_64bits(all.data(), all.size());
}

}  // namespace

std::string Term::ColumnName() const {
  switch (kind) {
    case Kind::kParam:
      return "params." + key;
    case Kind::kMetric:
      return "metrics." + key + (context.empty() ? "" : context.dump()) + "." +
             std::string(StatText(stat));
    case Kind::kAttribute:
      return std::string(AttributeText(attribute));
  }
  return "";
}

bool Term::IsIntegerStat() const {
  return kind == Kind::kMetric && stat != Stat::kLast && stat != Stat::kMin && stat != Stat::kMax;
}

Value Value::Number(double v) {
  Value out;
  out.kind = Kind::kNumber;
  out.number = v;
  return out;
}
Value Value::Text(std::string v) {
  Value out;
  out.kind = Kind::kText;
  out.text = std::move(v);
  return out;
}
Value Value::Flag(bool v) {
  Value out;
  out.kind = Kind::kFlag;
  out.flag = v;
  return out;
}
Value Value::FromJson(const nlohmann::json& j) {
  if (j.is_boolean()) return Flag(j.get<bool>());
  if (j.is_number()) return Number(j.get<double>());
  if (j.is_string()) return Text(j.get<std::string>());
  return Value{};
}
bool Value::missing() const {
  return kind == Kind::kMissing || (kind == Kind::kNumber && std::isnan(number));
}

Query Parse(const RunQuery& run_query) {
  Query q;
  if (run_query.limit == 0) throw Error(Code::kInvalidArgument, "limit must be at least 1");
  q.limit = run_query.limit;
  q.filter = Parser(run_query.filter, "filter", &q.terms).Filter();
  for (size_t i = 0; i < run_query.order_by.size(); ++i) {
    Parser(run_query.order_by[i], "order_by[" + std::to_string(i) + "]", &q.terms).Order(&q.order);
  }
  if (q.order.empty()) {
    Term created;
    created.attribute = Attribute::kCreatedAt;
    auto found = std::find(q.terms.begin(), q.terms.end(), created);
    if (found == q.terms.end()) q.terms.push_back(created);
    q.order.push_back(
        {static_cast<size_t>(std::find(q.terms.begin(), q.terms.end(), created) - q.terms.begin()),
         true});
  }
  if (run_query.columns) {
    q.default_columns = false;
    for (size_t i = 0; i < run_query.columns->size(); ++i) {
      q.columns.push_back(
          Parser((*run_query.columns)[i], "columns[" + std::to_string(i) + "]", &q.terms).Column());
    }
  }
  q.fingerprint = Fingerprint(run_query);

  if (!run_query.page_token.empty()) {
    auto bytes = Unhex(run_query.page_token);
    if (!bytes) BadToken("not a token of kv0's (hex digits expected)");
    auto j = nlohmann::json::parse(*bytes, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("f") || !j.contains("k") ||
        !j.contains("r") || !j["k"].is_array() || !j["r"].is_string() || !j["f"].is_string()) {
      BadToken("not a token of kv0's");
    }
    char fingerprint[17];
    std::snprintf(fingerprint, sizeof(fingerprint), "%016llx",
                  static_cast<unsigned long long>(q.fingerprint));
    if (j["f"] != fingerprint) BadToken("made by a query with another filter or order");
    if (j["k"].size() != q.order.size()) BadToken("not a token of kv0's");
    std::vector<Value> key;
    for (const auto& item : j["k"]) {
      auto v = DecodeValue(item);
      if (!v) BadToken("not a token of kv0's");
      key.push_back(std::move(*v));
    }
    q.after = std::move(key);
    auto run_id = Unhex(j["r"].get<std::string>());
    if (!run_id) BadToken("not a token of kv0's");
    q.after_run_id = std::move(*run_id);
  }
  return q;
}

const Value& MissingValue() {
  static const Value missing;
  return missing;
}

bool Matches(const Expr& e, const std::vector<Column>& columns, size_t row) {
  switch (e.kind) {
    case Expr::Kind::kAll:
      return true;
    case Expr::Kind::kAnd:
      for (const auto& c : e.children) {
        if (!Matches(c, columns, row)) return false;
      }
      return true;
    case Expr::Kind::kOr:
      for (const auto& c : e.children) {
        if (Matches(c, columns, row)) return true;
      }
      return false;
    case Expr::Kind::kNot:
      return !Matches(e.children[0], columns, row);
    case Expr::Kind::kCompare:
      break;
  }
  const Value& v = *columns[e.term][row];
  if (e.op == Op::kIsNull) return v.missing();
  if (e.op == Op::kIsNotNull) return !v.missing();
  if (v.missing()) return false;
  switch (e.op) {
    case Op::kEq:
    case Op::kIn:
      for (const auto& l : e.literals) {
        if (Equal(v, l)) return true;
      }
      return false;
    case Op::kNe:
    case Op::kNotIn:
      for (const auto& l : e.literals) {
        if (v.kind != l.kind || Equal(v, l)) return false;
      }
      return true;
    case Op::kLike:
    case Op::kILike:
    case Op::kNotLike:
    case Op::kNotILike: {
      if (v.kind != Value::Kind::kText) return false;
      bool fold = e.op == Op::kILike || e.op == Op::kNotILike;
      bool like = Like(v.text, e.literals[0].text, fold);
      return (e.op == Op::kLike || e.op == Op::kILike) ? like : !like;
    }
    default:
      break;
  }
  const Value& l = e.literals[0];
  if (v.kind != l.kind || v.kind == Value::Kind::kFlag) return false;
  int c = CompareSameKind(v, l);
  switch (e.op) {
    case Op::kLt:
      return c < 0;
    case Op::kLe:
      return c <= 0;
    case Op::kGt:
      return c > 0;
    case Op::kGe:
      return c >= 0;
    default:
      return false;
  }
}

int CompareForOrder(const Value& a, const Value& b, bool descending) {
  auto rank = [](const Value& v) {
    if (v.missing()) return 3;
    return v.kind == Value::Kind::kNumber ? 0 : v.kind == Value::Kind::kText ? 1 : 2;
  };
  int ra = rank(a), rb = rank(b);
  if (ra != rb) return ra < rb ? -1 : 1;
  if (ra == 3) return 0;
  int c = CompareSameKind(a, b);
  return descending ? -c : c;
}

std::string PageToken(const Query& query, const std::vector<Value>& key,
                      const std::string& run_id) {
  char fingerprint[17];
  std::snprintf(fingerprint, sizeof(fingerprint), "%016llx",
                static_cast<unsigned long long>(query.fingerprint));
  nlohmann::json j = {{"f", fingerprint}, {"k", nlohmann::json::array()}, {"r", Hex(run_id)}};
  for (const auto& v : key) j["k"].push_back(EncodeValue(v));
  return Hex(j.dump());
}

}  // namespace kv0::tracking::query
