//! The explicit-stack decode of recursive types.
//!
//! A type with a field of type `Box<Self>` or `Option<Box<Self>>` (`Self`
//! written as such or as the type's own name and parameters) gets a decode
//! that is a loop over a heap work stack instead of a recursion, so a value
//! nested ten million levels deep costs a small heap entry per level, not a
//! stack frame. For each such field of each variant the derive emits a
//! *partial*: a variant of a hidden enum holding the fields read before it.
//! Decoding a node reads fields up to its first recursive field, pushes the
//! partial and starts on the child; when a node is complete, the partial on
//! top of the stack is popped, the node becomes that field (boxed), and the
//! parent's remaining fields are read (which may push again). Nothing about
//! the wire changes: the same `Decoder` calls, in the same order, as the
//! recursive decode.
//!
//! Other shapes (`Vec<Self>`, `Arc<Self>`, mutual recursion through another
//! type) keep the recursive decode, on stack segments.

use proc_macro2::{Span, TokenStream as TokenStream2, TokenTree};
use quote::{format_ident, quote};
use syn::{Fields, GenericArgument, Ident, LitStr, PathArguments, Type};

use crate::Field;

/// How a field holds its own type.
#[derive(Clone, Copy, PartialEq)]
enum Rec {
    No,
    Boxed,
    OptBoxed,
}

/// One variant (a struct is one variant with `begin(name)`).
pub(crate) struct Shape<'a> {
    /// The value's constructor path (`Name` or `Name::V`).
    pub path: TokenStream2,
    pub fields: &'a Fields,
    pub fs: Vec<Field>,
    /// The name given to `begin` (`""` for an enum variant); `None` for a
    /// unit variant, which has no body.
    pub begin: Option<LitStr>,
}

fn single_arg<'t>(ty: &'t Type, wrapper: &str) -> Option<&'t Type> {
    let Type::Path(p) = ty else { return None };
    if p.qself.is_some() {
        return None;
    }
    let last = p.path.segments.last()?;
    if last.ident != wrapper {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    if args.args.len() != 1 {
        return None;
    }
    match args.args.first() {
        Some(GenericArgument::Type(t)) => Some(t),
        _ => None,
    }
}

fn squash(ts: TokenStream2) -> String {
    ts.to_string()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

fn is_self(ty: &Type, self_ty: &str) -> bool {
    let s = squash(quote!(#ty));
    s == "Self" || s == self_ty
}

fn rec_of(ty: &Type, self_ty: &str) -> Rec {
    if let Some(inner) = single_arg(ty, "Box") {
        if is_self(inner, self_ty) {
            return Rec::Boxed;
        }
    }
    if let Some(inner) = single_arg(ty, "Option").and_then(|t| single_arg(t, "Box")) {
        if is_self(inner, self_ty) {
            return Rec::OptBoxed;
        }
    }
    Rec::No
}

/// `Self` replaced by the type itself (a partial's fields live in another
/// type, where `Self` would name the partial).
fn unself(ts: TokenStream2, self_ty: &TokenStream2) -> TokenStream2 {
    ts.into_iter()
        .map(|t| match t {
            TokenTree::Ident(id) if id == "Self" => self_ty.clone(),
            TokenTree::Group(g) => {
                let mut ng = proc_macro2::Group::new(g.delimiter(), unself(g.stream(), self_ty));
                ng.set_span(g.span());
                TokenTree::Group(ng).into()
            }
            t => t.into(),
        })
        .collect()
}

struct Gen<'a> {
    partial: &'a Ident,
    /// Does any partial hold a recursive field (so the stack may hold deep
    /// values)?
    stack_deep: bool,
}

impl Gen<'_> {
    /// `return Err(..)`, burying the stack and the fields bound so far.
    fn fail(&self, bound: &[(&Ident, Rec)]) -> TokenStream2 {
        let vars = bound.iter().map(|(v, _)| v);
        let deep = self.stack_deep || bound.iter().any(|(_, r)| *r != Rec::No);
        let depth = if deep {
            quote!(__stack.max_depth())
        } else {
            quote!(0usize)
        };
        quote! {{
            let __depth = #depth;
            return ::core::result::Result::Err(__d.bury_deep((__stack, (#(#vars,)*)), __depth, __e));
        }}
    }

    /// Reads the fields of `shape` from `from` on (the earlier ones bound),
    /// ending in `__v = value;` or in a push and `continue 'node`.
    fn from<'s>(
        &self,
        vi: usize,
        shape: &'s Shape<'_>,
        recs: &[Rec],
        from: usize,
        bound: &mut Vec<(&'s Ident, Rec)>,
    ) -> TokenStream2 {
        let mut out = TokenStream2::new();
        let start_len = bound.len();
        for k in from..shape.fs.len() {
            let f = &shape.fs[k];
            let name = LitStr::new(&f.name, Span::call_site());
            let ty = &f.ty;
            let var = &f.var;
            let fail = self.fail(bound);
            let push = {
                let p = self.partial;
                let pv = format_ident!("P{}_{}", vi, k);
                let vars = bound.iter().map(|(v, _)| v);
                let vars2 = bound.iter().map(|(v, _)| v);
                quote! {
                    if let ::core::result::Result::Err(__e) = __d.deep_check(__stack.len() + 1) {
                        let __depth = __stack.max_depth();
                        return ::core::result::Result::Err(__d.bury_deep((__stack, (#(#vars2,)*)), __depth, __e));
                    }
                    __stack.push(#p::#pv(#(#vars),*));
                    continue 'node;
                }
            };
            match recs[k] {
                Rec::No => {
                    out.extend(quote! {
                        let #var: #ty = match __d.field(#name).and_then(|()| <#ty as ::graft::graph::Mobile>::decode(__d)) {
                            ::core::result::Result::Ok(v) => v,
                            ::core::result::Result::Err(__e) => #fail,
                        };
                    });
                }
                Rec::Boxed => {
                    out.extend(quote! {
                        if let ::core::result::Result::Err(__e) = __d.field(#name) #fail
                        #push
                    });
                    bound.truncate(start_len);
                    return out;
                }
                Rec::OptBoxed => {
                    bound.push((var, Rec::OptBoxed));
                    let rest = self.from(vi, shape, recs, k + 1, bound);
                    bound.pop();
                    out.extend(quote! {
                        if let ::core::result::Result::Err(__e) = __d.field(#name) #fail
                        match __d.variant(&["None", "Some"]) {
                            ::core::result::Result::Err(__e) => #fail,
                            ::core::result::Result::Ok(0) => {
                                let #var: #ty = ::core::option::Option::None;
                                #rest
                            }
                            ::core::result::Result::Ok(_) => {
                                #push
                            }
                        }
                    });
                    bound.truncate(start_len);
                    return out;
                }
            }
            bound.push((var, Rec::No));
        }
        let fail = self.fail(bound);
        let build = crate::with_vars(shape.path.clone(), shape.fields, &shape.fs);
        out.extend(quote! {
            if let ::core::result::Result::Err(__e) = __d.end() #fail
            __v = #build;
        });
        bound.truncate(start_len);
        out
    }
}

/// The hidden partial enum and the decode body, or `None` when the type has
/// no recursive field (or has lifetime or const parameters): then the
/// recursive decode is kept.
pub(crate) fn expand(
    input: &syn::DeriveInput,
    shapes: &[Shape<'_>],
    head: TokenStream2,
) -> Option<(TokenStream2, TokenStream2)> {
    if input.generics.lifetimes().next().is_some() || input.generics.const_params().next().is_some()
    {
        return None;
    }
    let name = &input.ident;
    let (impl_g, ty_g, where_c) = input.generics.split_for_impl();
    let self_ts = quote!(#name #ty_g);
    let self_ty = squash(self_ts.clone());
    let recs: Vec<Vec<Rec>> = shapes
        .iter()
        .map(|s| s.fs.iter().map(|f| rec_of(&f.ty, &self_ty)).collect())
        .collect();
    if !recs.iter().flatten().any(|r| *r != Rec::No) {
        return None;
    }
    let partial = format_ident!("__GraftPartial{}", name);

    // The partials: one per recursive field of each variant.
    let mut variants = Vec::new();
    let mut stack_deep = false;
    for (vi, s) in shapes.iter().enumerate() {
        for (k, r) in recs[vi].iter().enumerate() {
            if *r == Rec::No {
                continue;
            }
            if recs[vi][..k].iter().any(|r| *r != Rec::No) {
                stack_deep = true;
            }
            let pv = format_ident!("P{}_{}", vi, k);
            let tys = s.fs[..k].iter().map(|f| {
                let ty = &f.ty;
                unself(quote!(#ty), &self_ts)
            });
            variants.push(quote!(#pv(#(#tys),*)));
        }
    }
    let params: Vec<&Ident> = input.generics.type_params().map(|p| &p.ident).collect();
    let phantom = if params.is_empty() {
        quote!()
    } else {
        quote!(__Phantom(::core::convert::Infallible, ::core::marker::PhantomData<fn() -> (#(#params,)*)>),)
    };
    let phantom_arm = if params.is_empty() {
        quote!()
    } else {
        quote!(::core::option::Option::Some(#partial::__Phantom(__never, _)) => match __never {},)
    };
    let def = quote! {
        #[doc(hidden)]
        #[allow(non_camel_case_types, dead_code, clippy::type_complexity)]
        enum #partial #impl_g #where_c {
            #(#variants,)*
            #phantom
        }
    };

    let g = Gen {
        partial: &partial,
        stack_deep,
    };
    // The head: one node's variant and its fields up to the first push.
    let mut arms = Vec::new();
    let mut resumes = Vec::new();
    for (vi, s) in shapes.iter().enumerate() {
        let body = match &s.begin {
            Some(b) => {
                let mut bound = Vec::new();
                let body = g.from(vi, s, &recs[vi], 0, &mut bound);
                let fail = g.fail(&[]);
                quote! {
                    if let ::core::result::Result::Err(__e) = __d.begin(#b) #fail
                    #body
                }
            }
            None => {
                let path = &s.path;
                quote!(__v = #path;)
            }
        };
        arms.push(body);
        for (k, r) in recs[vi].iter().enumerate() {
            if *r == Rec::No {
                continue;
            }
            let pv = format_ident!("P{}_{}", vi, k);
            let before: Vec<&Ident> = s.fs[..k].iter().map(|f| &f.var).collect();
            let mut bound: Vec<(&Ident, Rec)> = s.fs[..k]
                .iter()
                .zip(&recs[vi])
                .map(|(f, r)| (&f.var, *r))
                .collect();
            let var = &s.fs[k].var;
            let ty = &s.fs[k].ty;
            let wrap = match r {
                Rec::Boxed => quote!(::std::boxed::Box::new(__v)),
                _ => quote!(::core::option::Option::Some(::std::boxed::Box::new(__v))),
            };
            bound.push((var, *r));
            let rest = g.from(vi, s, &recs[vi], k + 1, &mut bound);
            resumes.push(quote! {
                ::core::option::Option::Some(#partial::#pv(#(#before),*)) => {
                    let #var: #ty = #wrap;
                    #rest
                }
            });
        }
    }
    let head = head_of(head, &arms, &g);
    let body = quote! {
        let mut __stack: ::graft::graph::DeepStack<#partial #ty_g> = ::graft::graph::DeepStack::new();
        let mut __v: Self;
        'node: loop {
            #head
            loop {
                match __stack.pop() {
                    ::core::option::Option::None => {
                        __d.deep_done(__stack.max_depth());
                        return ::core::result::Result::Ok(__v);
                    }
                    #(#resumes)*
                    #phantom_arm
                }
            }
        }
    };
    Some((def, body))
}

/// The head for a struct (`head` is empty: one shape) or an enum (`head` is
/// the variant names: a match on the variant read).
fn head_of(names: TokenStream2, arms: &[TokenStream2], g: &Gen<'_>) -> TokenStream2 {
    let fail = g.fail(&[]);
    if names.is_empty() {
        return arms[0].clone();
    }
    let idx = (0..arms.len() as u32).map(|i| quote!(#i));
    quote! {
        match __d.variant(&[#names]) {
            #(::core::result::Result::Ok(#idx) => { #arms })*
            ::core::result::Result::Ok(_) => {
                let __e = __d.invalid("no such variant");
                #fail
            }
            ::core::result::Result::Err(__e) => #fail,
        }
    }
}
