package spec

import (
	"fmt"
	"reflect"
	"sort"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/conf"
)

// Scope holds the values that expressions see when a stage is resolved.
type Scope struct {
	Params  map[string]any
	Cluster ClusterValue
	Stages  map[string]StageValue
	Env     map[string]string
	Run     RunValue
	// Failed is whether a stage this one needs (directly or through
	// others) failed: failure() in a condition. Cancelled is the same for
	// a cancelled stage, or true for every stage once the run was
	// interrupted: cancelled(). success() is neither.
	Failed, Cancelled bool
}

// StatusFuncs are the functions a stage's `if` may call, with GitHub
// Actions' names and meanings: success() (every stage it needs, directly or
// not, succeeded or was cached; what a condition without them adds),
// failure() (one of them failed), cancelled() (one was cancelled, or the
// run was interrupted) and always().
var StatusFuncs = []string{"success", "failure", "always", "cancelled"}

func isStatusFunc(name string) bool {
	for _, f := range StatusFuncs {
		if f == name {
			return true
		}
	}
	return false
}

// ClusterValue is `cluster` in expressions: the effective cluster of the
// stage being resolved.
type ClusterValue struct {
	Devices   int
	Hosts     int
	RankTable string
}

// StageValue is `stages.<id>` in expressions.
type StageValue struct {
	Status  string
	Outputs map[string]any
}

// RunValue is `run` in expressions.
type RunValue struct {
	ID   string
	Name string
	Dir  string
}

// envType is the static type of the expression environment of one pipeline:
// a struct per namespace whose fields carry `expr` tags with the real names,
// so expr-lang type-checks every member access at validation time.
type envType struct {
	typ     reflect.Type
	params  fieldSet
	stages  fieldSet            // stage id -> field of the stages struct
	outputs map[string]fieldSet // stage id -> its outputs struct
	shared  *conf.Config        // see compileEnv
}

type fieldSet struct {
	typ   reflect.Type
	index map[string]int
}

var (
	anyType    = reflect.TypeOf((*any)(nil)).Elem()
	stringType = reflect.TypeOf("")
	intType    = reflect.TypeOf(0)
)

// goType is the Go type a spec Type has in expressions.
func goType(t Type) reflect.Type {
	switch t {
	case TypeInt:
		return intType
	case TypeFloat:
		return reflect.TypeOf(0.0)
	case TypeString, TypePath:
		return stringType
	case TypeBool:
		return reflect.TypeOf(false)
	case TypeList:
		return reflect.TypeOf([]any{})
	case TypeMap:
		return reflect.TypeOf(map[string]any{})
	}
	return anyType
}

// makeStruct builds a struct type whose fields expr-lang sees under names.
func makeStruct(names []string, types []reflect.Type) fieldSet {
	fields := make([]reflect.StructField, len(names))
	index := make(map[string]int, len(names))
	for i, n := range names {
		fields[i] = reflect.StructField{
			Name: fmt.Sprintf("F%d", i),
			Type: types[i],
			Tag:  reflect.StructTag(fmt.Sprintf(`expr:%q`, n)),
		}
		index[n] = i
	}
	return fieldSet{typ: reflect.StructOf(fields), index: index}
}

var (
	clusterFields = makeStruct([]string{"devices", "hosts", "rank_table"}, []reflect.Type{intType, intType, stringType})
	runFields     = makeStruct([]string{"id", "name", "dir"}, []reflect.Type{stringType, stringType, stringType})
)

// rootNames are the top-level names of the expression environment.
var rootNames = []string{"params", "cluster", "stages", "env", "run"}

// buildEnvType derives the environment type from the params and the
// outputs each stage declares.
//
// A stage in open (its plugin could not be described, or was not started:
// ErrUnchecked) gets outputs of type map[string]any, so reading them reports
// nothing beyond the uses error or warning.
func buildEnvType(p *Pipeline, outputs map[string][]OutputDecl, open map[string]bool) *envType {
	et := &envType{outputs: map[string]fieldSet{}}
	var pn []string
	var pt []reflect.Type
	for _, prm := range p.Params {
		pn = append(pn, prm.Name)
		pt = append(pt, goType(prm.Type))
	}
	et.params = makeStruct(pn, pt)

	var sn []string
	var st []reflect.Type
	for _, s := range p.Stages {
		if _, dup := et.outputs[s.ID]; dup || !identRe.MatchString(s.ID) {
			continue
		}
		var on []string
		var ot []reflect.Type
		decls := append([]OutputDecl(nil), outputs[s.ID]...)
		sort.Slice(decls, func(i, j int) bool { return decls[i].Name < decls[j].Name })
		for _, o := range decls {
			on = append(on, o.Name)
			ot = append(ot, goType(o.Type))
		}
		of := makeStruct(on, ot)
		et.outputs[s.ID] = of
		outType := of.typ
		if open[s.ID] {
			outType = reflect.TypeOf(map[string]any{})
		}
		sv := makeStruct([]string{"outputs", "status"}, []reflect.Type{outType, stringType})
		sn = append(sn, s.ID)
		st = append(st, sv.typ)
	}
	et.stages = makeStruct(sn, st)
	statusFunc := reflect.TypeOf(func() bool { return false })
	root := makeStruct(append(append([]string(nil), rootNames...), StatusFuncs...), []reflect.Type{et.params.typ, clusterFields.typ, et.stages.typ,
		reflect.TypeOf(map[string]string{}), runFields.typ, statusFunc, statusFunc, statusFunc, statusFunc})
	et.typ = root.typ
	return et
}

// compileEnv is the expr option that declares the environment type when
// compiling. It is made once per pipeline and shared by every compilation:
// expr.Env would allocate a zero environment (as large as the pipeline) and
// look struct fields up afresh for each expression, and each compiled
// program keeps its lookups, so a pipeline of n stages reading their
// predecessors held n² field entries. Sharing the config's type cache keeps
// one entry per field. Compilations must not run concurrently.
func (et *envType) compileEnv() expr.Option {
	if et.shared == nil {
		et.shared = conf.New(reflect.New(et.typ).Elem().Interface())
	}
	base := et.shared
	return func(c *conf.Config) {
		c.EnvObject, c.NtCache, c.Env, c.Strict = base.EnvObject, base.NtCache, base.Env, base.Strict
	}
}

// value builds the environment for a scope. Values are converted to the
// declared types; a value that does not fit is an error naming it.
func (et *envType) value(sc *Scope) (any, error) {
	root := reflect.New(et.typ).Elem()
	params := root.Field(0)
	for name, i := range et.params.index {
		v, ok := sc.Params[name]
		if !ok {
			continue
		}
		if err := setField(params.Field(i), v); err != nil {
			return nil, fmt.Errorf("params.%s: %w", name, err)
		}
	}
	cl := root.Field(1)
	cl.Field(0).SetInt(int64(sc.Cluster.Devices))
	cl.Field(1).SetInt(int64(sc.Cluster.Hosts))
	cl.Field(2).SetString(sc.Cluster.RankTable)
	stages := root.Field(2)
	for id, i := range et.stages.index {
		sv, ok := sc.Stages[id]
		if !ok {
			continue
		}
		f := stages.Field(i)
		f.Field(1).SetString(sv.Status)
		if f.Field(0).Kind() == reflect.Map {
			f.Field(0).Set(reflect.ValueOf(sv.Outputs))
			continue
		}
		outs := et.outputs[id]
		for name, j := range outs.index {
			v, ok := sv.Outputs[name]
			if !ok {
				continue
			}
			if err := setField(f.Field(0).Field(j), v); err != nil {
				return nil, fmt.Errorf("stages.%s.outputs.%s: %w", id, name, err)
			}
		}
	}
	env := sc.Env
	if env == nil {
		env = map[string]string{}
	}
	root.Field(3).Set(reflect.ValueOf(env))
	run := root.Field(4)
	run.Field(0).SetString(sc.Run.ID)
	run.Field(1).SetString(sc.Run.Name)
	run.Field(2).SetString(sc.Run.Dir)
	failed, cancelled := sc.Failed, sc.Cancelled
	for i, f := range []func() bool{
		func() bool { return !failed && !cancelled },
		func() bool { return failed },
		func() bool { return true },
		func() bool { return cancelled },
	} {
		root.Field(len(rootNames) + i).Set(reflect.ValueOf(f))
	}
	return root.Interface(), nil
}

func setField(f reflect.Value, v any) error {
	if v == nil {
		return nil
	}
	if f.Kind() == reflect.Interface {
		f.Set(reflect.ValueOf(v))
		return nil
	}
	var t Type
	switch f.Kind() {
	case reflect.Int:
		t = TypeInt
	case reflect.Float64:
		t = TypeFloat
	case reflect.String:
		t = TypeString
	case reflect.Bool:
		t = TypeBool
	case reflect.Slice:
		t = TypeList
	case reflect.Map:
		t = TypeMap
	}
	c, err := ConvertValue(v, t)
	if err != nil {
		return err
	}
	f.Set(reflect.ValueOf(c))
	return nil
}

// ConvertValue converts plain data (as decoded from YAML or JSON) to the Go
// value of type t: int, float64, string, bool, []any or map[string]any.
// A float with no fraction converts to int; an int converts to float.
func ConvertValue(v any, t Type) (any, error) {
	switch t {
	case TypeAny, "":
		return v, nil
	case TypeInt:
		switch x := v.(type) {
		case int:
			return x, nil
		case int64:
			return int(x), nil
		case float64:
			if x == float64(int(x)) && x < 1<<53 && x > -(1<<53) {
				return int(x), nil
			}
		}
		return nil, fmt.Errorf("expected an integer")
	case TypeFloat:
		switch x := v.(type) {
		case float64:
			return x, nil
		case int:
			return float64(x), nil
		case int64:
			return float64(x), nil
		}
		return nil, fmt.Errorf("expected a number")
	case TypeString, TypePath:
		if s, ok := v.(string); ok {
			return s, nil
		}
		return nil, fmt.Errorf("expected a string")
	case TypeBool:
		if b, ok := v.(bool); ok {
			return b, nil
		}
		return nil, fmt.Errorf("expected a boolean")
	case TypeList:
		if l, ok := v.([]any); ok {
			return l, nil
		}
		return nil, fmt.Errorf("expected a list")
	case TypeMap:
		if m, ok := v.(map[string]any); ok {
			return m, nil
		}
		return nil, fmt.Errorf("expected a mapping")
	}
	return nil, fmt.Errorf("unknown type %q", t)
}
