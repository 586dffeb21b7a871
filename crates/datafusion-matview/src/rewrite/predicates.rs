//! What a block's conjuncts say, in the three parts Goldstein and Larson
//! compare (*Optimizing queries using materialized views*, SIGMOD 2001):
//! column equivalence classes (`a = b`), ranges of a class (`a > 5`,
//! `a = 'x'`), and the residue, compared by its text. From a query's and a
//! view's, whether the query's imply the view's, and if they do, the
//! predicates that turn the view's rows into the query's.

use std::cmp::Ordering;

use datafusion::common::{Column, ScalarValue};
use datafusion::logical_expr::{Expr, Operator};

/// A block's conjuncts, split.
#[derive(Debug, Default)]
pub(crate) struct Predicates {
    /// Equivalence classes of columns (each of at least two).
    classes: Vec<Vec<Column>>,
    /// Ranges, each on every column of its class (or on one column).
    ranges: Vec<(Vec<Column>, Range)>,
    /// The rest, each with its columns replaced by their class's first.
    residue: Vec<Expr>,
}

/// Bounds on a column's values, from comparisons with constants.
#[derive(Debug, Clone, Default, PartialEq)]
struct Range {
    /// The lower bound and whether it is included.
    lower: Option<(ScalarValue, bool)>,
    /// The upper bound and whether it is included.
    upper: Option<(ScalarValue, bool)>,
}

impl Range {
    fn of(op: Operator, value: ScalarValue) -> Option<Range> {
        let mut range = Range::default();
        match op {
            Operator::Eq => {
                range.lower = Some((value.clone(), true));
                range.upper = Some((value, true));
            }
            Operator::Gt => range.lower = Some((value, false)),
            Operator::GtEq => range.lower = Some((value, true)),
            Operator::Lt => range.upper = Some((value, false)),
            Operator::LtEq => range.upper = Some((value, true)),
            _ => return None,
        }
        Some(range)
    }

    /// The tighter of two bounds of one side, `None` when they cannot be
    /// compared. `upper` says which side they bound.
    fn tighter(
        a: &Option<(ScalarValue, bool)>,
        b: &Option<(ScalarValue, bool)>,
        upper: bool,
    ) -> Option<Option<(ScalarValue, bool)>> {
        match (a, b) {
            (None, x) | (x, None) => Some(x.clone()),
            (Some((va, ia)), Some((vb, ib))) => {
                let ordering = va.partial_cmp(vb)?;
                let a_tighter = match ordering {
                    Ordering::Equal => !ia || *ib,
                    Ordering::Less => upper,
                    Ordering::Greater => !upper,
                };
                Some(Some(if a_tighter {
                    (va.clone(), *ia && (ordering != Ordering::Equal || *ib))
                } else {
                    (vb.clone(), *ib)
                }))
            }
        }
    }

    fn intersect(&self, other: &Range) -> Option<Range> {
        Some(Range {
            lower: Self::tighter(&self.lower, &other.lower, false)?,
            upper: Self::tighter(&self.upper, &other.upper, true)?,
        })
    }

    /// Whether bound `inner` is at least as tight as `outer` on its side;
    /// `None` when they cannot be compared.
    fn within(
        inner: &Option<(ScalarValue, bool)>,
        outer: &Option<(ScalarValue, bool)>,
        upper: bool,
    ) -> Option<bool> {
        match (inner, outer) {
            (_, None) => Some(true),
            (None, Some(_)) => Some(false),
            (Some((vi, ii)), Some((vo, io))) => Some(match vi.partial_cmp(vo)? {
                Ordering::Equal => *io || !ii,
                Ordering::Less => upper,
                Ordering::Greater => !upper,
            }),
        }
    }

    /// Whether every value this range admits, `outer` admits.
    fn implies(&self, outer: &Range) -> Option<bool> {
        Some(
            Self::within(&self.lower, &outer.lower, false)?
                && Self::within(&self.upper, &outer.upper, true)?,
        )
    }

    /// The predicates on `column` that narrow `outer` to this range.
    fn narrowing(&self, outer: &Range, column: &Expr) -> Vec<Expr> {
        let literal = |v: &ScalarValue| Expr::Literal(v.clone(), None);
        if let (Some((low, true)), Some((high, true))) = (&self.lower, &self.upper)
            && low == high
            && outer != self
        {
            return vec![column.clone().eq(literal(low))];
        }
        let mut out = vec![];
        if self.lower != outer.lower
            && let Some((value, inclusive)) = &self.lower
        {
            out.push(if *inclusive {
                column.clone().gt_eq(literal(value))
            } else {
                column.clone().gt(literal(value))
            });
        }
        if self.upper != outer.upper
            && let Some((value, inclusive)) = &self.upper
        {
            out.push(if *inclusive {
                column.clone().lt_eq(literal(value))
            } else {
                column.clone().lt(literal(value))
            });
        }
        out
    }
}

/// The constant `expr` is, folding casts of literals.
fn constant(expr: &Expr) -> Option<ScalarValue> {
    match expr {
        Expr::Literal(value, _) if !value.is_null() => Some(value.clone()),
        Expr::Cast(cast) => constant(&cast.expr)?.cast_to(cast.field.data_type()).ok(),
        Expr::TryCast(cast) => constant(&cast.expr)?.cast_to(cast.field.data_type()).ok(),
        _ => None,
    }
}

impl Predicates {
    /// Splits canonical, normalized conjuncts (see [`super::normal`]).
    pub(crate) fn new(conjuncts: &[Expr]) -> Predicates {
        let mut out = Predicates::default();
        let mut rest = vec![];
        for conjunct in conjuncts {
            if let Expr::BinaryExpr(b) = conjunct
                && b.op == Operator::Eq
                && let (Expr::Column(l), Expr::Column(r)) = (b.left.as_ref(), b.right.as_ref())
            {
                out.join(l, r);
            } else {
                rest.push(conjunct);
            }
        }
        for conjunct in rest {
            if let Expr::BinaryExpr(b) = conjunct
                && let Expr::Column(column) = b.left.as_ref()
                && let Some(value) = constant(&b.right)
                && let Some(range) = Range::of(b.op, value)
            {
                let class = out.class(column);
                match out.ranges.iter_mut().find(|(c, _)| *c == class) {
                    Some((_, existing)) => match existing.intersect(&range) {
                        Some(narrower) => *existing = narrower,
                        None => out.residue.push(conjunct.clone()),
                    },
                    None => out.ranges.push((class, range)),
                }
                continue;
            }
            let residue = out.canonical(conjunct);
            if !out.residue.contains(&residue) {
                out.residue.push(residue);
            }
        }
        out
    }

    fn join(&mut self, a: &Column, b: &Column) {
        let ia = self.classes.iter().position(|c| c.contains(a));
        let ib = self.classes.iter().position(|c| c.contains(b));
        match (ia, ib) {
            (Some(i), Some(j)) if i == j => {}
            (Some(i), Some(j)) => {
                let moved = self.classes.remove(i.max(j));
                self.classes[i.min(j)].extend(moved);
            }
            (Some(i), None) => self.classes[i].push(b.clone()),
            (None, Some(j)) => self.classes[j].push(a.clone()),
            (None, None) => self.classes.push(vec![a.clone(), b.clone()]),
        }
        for class in &mut self.classes {
            class.sort_by_key(|c| c.flat_name());
        }
    }

    /// The columns equal to `column` (itself first if alone).
    pub(crate) fn class(&self, column: &Column) -> Vec<Column> {
        self.classes
            .iter()
            .find(|c| c.contains(column))
            .cloned()
            .unwrap_or_else(|| vec![column.clone()])
    }

    /// `expr` with each column replaced by the first of its class.
    pub(crate) fn canonical(&self, expr: &Expr) -> Expr {
        use datafusion::common::tree_node::{Transformed, TreeNode};
        let replaced = expr
            .clone()
            .transform_up(|e| match e {
                Expr::Column(c) => {
                    let first = self.class(&c).swap_remove(0);
                    Ok(Transformed::yes(Expr::Column(first)))
                }
                other => Ok(Transformed::no(other)),
            })
            .expect("replacing columns does not fail")
            .data;
        super::normal::normalize(replaced)
    }

    fn range_of(&self, class: &[Column]) -> Range {
        // The view's classes are within the query's: every view range on
        // a column of `class` bounds it.
        let mut out = Range::default();
        for (columns, range) in &self.ranges {
            if columns.iter().any(|c| class.contains(c)) {
                match out.intersect(range) {
                    Some(narrower) => out = narrower,
                    None => return Range::default(),
                }
            }
        }
        out
    }

    /// When this block's (the query's) predicates imply `view`'s, the
    /// conjuncts that select the query's rows from the view's, each given
    /// as alternatives over equal columns; else why not.
    pub(crate) fn compensation(&self, view: &Predicates) -> Result<Vec<Vec<Expr>>, String> {
        // Every view equality holds in the query.
        for class in &view.classes {
            let ours = self.class(&class[0]);
            if let Some(c) = class.iter().find(|c| !ours.contains(c)) {
                return Err(format!(
                    "the query does not require {} = {}",
                    class[0].flat_name(),
                    c.flat_name()
                ));
            }
        }
        // Every view range admits the query's values.
        for (columns, range) in &view.ranges {
            let ours = self.range_of(&self.class(&columns[0]));
            if ours.implies(range) != Some(true) {
                return Err(format!(
                    "the query admits values of {} the view left out",
                    columns[0].flat_name()
                ));
            }
        }
        // Every view residue is the query's.
        let ours: Vec<Expr> = self.residue.iter().map(|e| self.canonical(e)).collect();
        for residue in &view.residue {
            if !ours.contains(&self.canonical(residue)) {
                return Err(format!("the query does not require {residue}"));
            }
        }
        let mut out = vec![];
        // Query equalities the view does not have.
        for class in &self.classes {
            let mut seen: Vec<Vec<Column>> = vec![];
            for column in class {
                if !seen.iter().any(|s| s.contains(column)) {
                    seen.push(view.class(column));
                }
            }
            let first = &seen[0];
            for other in &seen[1..] {
                out.push(
                    first
                        .iter()
                        .flat_map(|a| {
                            other
                                .iter()
                                .map(move |b| Expr::Column(a.clone()).eq(Expr::Column(b.clone())))
                        })
                        .collect(),
                );
            }
        }
        // Query ranges narrower than the view's.
        for (columns, range) in &self.ranges {
            let theirs = view.range_of(columns);
            let alternatives: Vec<Vec<Expr>> = columns
                .iter()
                .map(|c| range.narrowing(&theirs, &Expr::Column(c.clone())))
                .collect();
            for i in 0..alternatives[0].len() {
                out.push(alternatives.iter().map(|a| a[i].clone()).collect());
            }
        }
        // Query residue the view does not have.
        let theirs: Vec<Expr> = view.residue.iter().map(|e| self.canonical(e)).collect();
        for residue in &self.residue {
            if !theirs.contains(&self.canonical(residue)) {
                out.push(vec![residue.clone()]);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{col, lit};

    fn c(name: &str) -> Expr {
        col(format!("t.{name}"))
    }

    fn texts(alternatives: Vec<Vec<Expr>>) -> Vec<String> {
        alternatives
            .into_iter()
            .map(|a| {
                a.iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join(" | ")
            })
            .collect()
    }

    #[test]
    fn narrower_ranges_compensate_and_wider_ones_refuse() {
        let view = Predicates::new(&[c("a").gt_eq(lit(10))]);
        let query = Predicates::new(&[c("a").gt(lit(20)), c("a").lt(lit(30))]);
        assert_eq!(
            texts(query.compensation(&view).unwrap()),
            ["t.a > Int32(20)", "t.a < Int32(30)"]
        );
        let wider = Predicates::new(&[c("a").gt(lit(5))]);
        assert!(wider.compensation(&view).is_err());
        let none = Predicates::new(&[]);
        assert!(none.compensation(&view).is_err());
        // Equal bounds need nothing; an inclusive bound is not within an
        // exclusive one of the same value.
        let same = Predicates::new(&[c("a").gt_eq(lit(10))]);
        assert!(same.compensation(&view).unwrap().is_empty());
        let exclusive = Predicates::new(&[c("a").gt(lit(10))]);
        assert_eq!(
            texts(exclusive.compensation(&view).unwrap()),
            ["t.a > Int32(10)"]
        );
        let view = Predicates::new(&[c("a").gt(lit(10))]);
        assert!(same.compensation(&view).is_err());
    }

    #[test]
    fn equalities_carry_ranges_and_residue_compares_by_class() {
        // The view joins a = b and bounds b; the query bounds a, which is
        // the same column once joined.
        let view = Predicates::new(&[c("a").eq(c("b")), c("b").gt(lit(1))]);
        let query = Predicates::new(&[c("b").eq(c("a")), c("a").gt(lit(3))]);
        assert_eq!(
            texts(query.compensation(&view).unwrap()),
            ["t.a > Int32(3) | t.b > Int32(3)"]
        );
        // A query without the view's join is refused.
        let unjoined = Predicates::new(&[c("a").gt(lit(3))]);
        assert!(unjoined.compensation(&view).is_err());
        // Residue: the view's must be the query's, the query's extra is
        // compensation.
        let like = c("s").like(lit("x%"));
        let view = Predicates::new(std::slice::from_ref(&like));
        let query = Predicates::new(&[like.clone(), c("s").not_eq(lit("xy"))]);
        assert_eq!(
            texts(query.compensation(&view).unwrap()),
            ["t.s != Utf8(\"xy\")"]
        );
        assert!(Predicates::new(&[]).compensation(&view).is_err());
        // A query equality the view lacks is compensation.
        let view = Predicates::new(&[]);
        let query = Predicates::new(&[c("a").eq(c("b"))]);
        assert_eq!(texts(query.compensation(&view).unwrap()), ["t.a = t.b"]);
    }
}
