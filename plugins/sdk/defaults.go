package sdk

// applyDefaults returns v with the schema's defaults filled in where a
// property is absent, recursively through nested objects. v is not modified.
func applyDefaults(schema map[string]any, v any) any {
	obj, isObj := v.(map[string]any)
	props, hasProps := schema["properties"].(map[string]any)
	if !isObj && v == nil && hasProps {
		obj, isObj = map[string]any{}, true
	}
	if !isObj || !hasProps {
		return v
	}
	out := make(map[string]any, len(obj))
	for k, x := range obj {
		out[k] = x
	}
	for name, ps := range props {
		sub, ok := ps.(map[string]any)
		if !ok {
			continue
		}
		if x, present := out[name]; present {
			if _, nested := x.(map[string]any); nested {
				out[name] = applyDefaults(sub, x)
			}
			continue
		}
		if d, ok := sub["default"]; ok {
			out[name] = d
		}
	}
	return out
}
