package scalesim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// value is one datapoint of a CloudWatch time series: a number, or missing (no data in
// that period).
type value struct {
	v  float64
	ok bool
}

var missing = value{}

func some(v float64) value { return value{v: v, ok: true} }

// expr is a parsed metric-math expression, evaluated one period at a time.
type expr func(env map[string]value) value

// parseExpr parses the subset of CloudWatch metric math the template uses: numbers, query
// ids, + - * /, comparisons (== != < <= > >=, 1 for true, 0 for false), AND and OR (also &&
// and ||), parentheses, IF(condition, then, else) and FILL(series, value).
//
// Missing data follows CloudWatch: arithmetic and comparisons with a missing datapoint give
// a missing datapoint, IF with a missing condition too, and FILL replaces a missing
// datapoint. Division by zero gives a missing datapoint (the template never divides by a
// zero it can produce: a task that reports WorkerSlots reports at least 1).
func parseExpr(s string) (expr, error) {
	p := &parser{src: s}
	p.next()
	e, err := p.or()
	if err != nil {
		return nil, fmt.Errorf("expression %q: %w", s, err)
	}
	if p.tok != "" {
		return nil, fmt.Errorf("expression %q: unexpected %q", s, p.tok)
	}
	return e, nil
}

type parser struct {
	src string
	pos int
	tok string // the current token; "" at the end
}

func (p *parser) next() {
	for p.pos < len(p.src) && p.src[p.pos] == ' ' {
		p.pos++
	}
	if p.pos == len(p.src) {
		p.tok = ""
		return
	}
	start := p.pos
	c := rune(p.src[p.pos])
	switch {
	case unicode.IsLetter(c) || c == '_':
		for p.pos < len(p.src) && isIdent(rune(p.src[p.pos])) {
			p.pos++
		}
	case unicode.IsDigit(c) || c == '.':
		for p.pos < len(p.src) && (unicode.IsDigit(rune(p.src[p.pos])) || p.src[p.pos] == '.') {
			p.pos++
		}
	default:
		p.pos++
		if p.pos < len(p.src) {
			if two := p.src[start : p.pos+1]; slices.Contains([]string{"==", "!=", "<=", ">=", "&&", "||"}, two) {
				p.pos++
			}
		}
	}
	p.tok = p.src[start:p.pos]
}

func isIdent(c rune) bool { return unicode.IsLetter(c) || unicode.IsDigit(c) || c == '_' }

// binary parses operands with sub, joined by the operators ops (left-associative).
func (p *parser) binary(sub func() (expr, error), ops map[string]func(a, b float64) (float64, bool)) (expr, error) {
	left, err := sub()
	if err != nil {
		return nil, err
	}
	for {
		op, ok := ops[strings.ToUpper(p.tok)]
		if !ok {
			return left, nil
		}
		p.next()
		right, err := sub()
		if err != nil {
			return nil, err
		}
		l := left
		left = func(env map[string]value) value {
			a, b := l(env), right(env)
			if !a.ok || !b.ok {
				return missing
			}
			if v, ok := op(a.v, b.v); ok {
				return some(v)
			}
			return missing
		}
	}
}

func truth(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (p *parser) or() (expr, error) {
	or := func(a, b float64) (float64, bool) { return truth(a != 0 || b != 0), true }
	return p.binary(p.and, map[string]func(a, b float64) (float64, bool){"OR": or, "||": or})
}

func (p *parser) and() (expr, error) {
	and := func(a, b float64) (float64, bool) { return truth(a != 0 && b != 0), true }
	return p.binary(p.cmp, map[string]func(a, b float64) (float64, bool){"AND": and, "&&": and})
}

func (p *parser) cmp() (expr, error) {
	return p.binary(p.add, map[string]func(a, b float64) (float64, bool){
		"==": func(a, b float64) (float64, bool) { return truth(a == b), true },
		"!=": func(a, b float64) (float64, bool) { return truth(a != b), true },
		"<":  func(a, b float64) (float64, bool) { return truth(a < b), true },
		"<=": func(a, b float64) (float64, bool) { return truth(a <= b), true },
		">":  func(a, b float64) (float64, bool) { return truth(a > b), true },
		">=": func(a, b float64) (float64, bool) { return truth(a >= b), true },
	})
}

func (p *parser) add() (expr, error) {
	return p.binary(p.mul, map[string]func(a, b float64) (float64, bool){
		"+": func(a, b float64) (float64, bool) { return a + b, true },
		"-": func(a, b float64) (float64, bool) { return a - b, true },
	})
}

func (p *parser) mul() (expr, error) {
	return p.binary(p.unary, map[string]func(a, b float64) (float64, bool){
		"*": func(a, b float64) (float64, bool) { return a * b, true },
		"/": func(a, b float64) (float64, bool) { return a / b, b != 0 },
	})
}

func (p *parser) unary() (expr, error) {
	if p.tok != "-" {
		return p.primary()
	}
	p.next()
	e, err := p.unary()
	if err != nil {
		return nil, err
	}
	return func(env map[string]value) value {
		v := e(env)
		return value{v: -v.v, ok: v.ok}
	}, nil
}

func (p *parser) primary() (expr, error) {
	tok := p.tok
	switch {
	case tok == "":
		return nil, fmt.Errorf("unexpected end")
	case tok == "(":
		p.next()
		e, err := p.or()
		if err != nil {
			return nil, err
		}
		if p.tok != ")" {
			return nil, fmt.Errorf("missing )")
		}
		p.next()
		return e, nil
	case unicode.IsDigit(rune(tok[0])) || tok[0] == '.':
		n, err := strconv.ParseFloat(tok, 64)
		if err != nil {
			return nil, err
		}
		p.next()
		return func(map[string]value) value { return some(n) }, nil
	case isIdent(rune(tok[0])):
		p.next()
		if p.tok != "(" {
			return func(env map[string]value) value { return env[tok] }, nil
		}
		return p.call(strings.ToUpper(tok))
	}
	return nil, fmt.Errorf("unexpected %q", tok)
}

func (p *parser) call(name string) (expr, error) {
	var args []expr
	for p.tok == "(" || p.tok == "," {
		p.next()
		a, err := p.or()
		if err != nil {
			return nil, err
		}
		args = append(args, a)
	}
	if p.tok != ")" {
		return nil, fmt.Errorf("%s: missing )", name)
	}
	p.next()
	switch {
	case name == "IF" && len(args) == 3:
		return func(env map[string]value) value {
			c := args[0](env)
			switch {
			case !c.ok:
				return missing
			case c.v != 0:
				return args[1](env)
			}
			return args[2](env)
		}, nil
	case name == "FILL" && len(args) == 2:
		return func(env map[string]value) value {
			if v := args[0](env); v.ok {
				return v
			}
			return args[1](env)
		}, nil
	}
	return nil, fmt.Errorf("unsupported function %s with %d arguments", name, len(args))
}
