// Scheme name -> factory: the only place that knows all schemes.
#include "index/scheme.hpp"

namespace pmhash {

extern const SchemeFactory kHdnhFactory;
extern const SchemeFactory kLineHTFactory;
extern const SchemeFactory kPmehFactory;
extern const SchemeFactory kSmartHTFactory;
extern const SchemeFactory kTurboHashFactory;
extern const SchemeFactory kWophiFactory;

const std::vector<const SchemeFactory*>& all_schemes() {
  static const std::vector<const SchemeFactory*> v = {&kSmartHTFactory, &kTurboHashFactory,
                                                      &kWophiFactory,   &kHdnhFactory,
                                                      &kPmehFactory,    &kLineHTFactory};
  return v;
}

const SchemeFactory* find_scheme(const std::string& name) {
  for (auto* f : all_schemes())
    if (name == f->name) return f;
  return nullptr;
}

}  // namespace pmhash
