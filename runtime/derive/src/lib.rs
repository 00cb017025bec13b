//! `#[derive(Mobile)]` for graft: structs (named, tuple, unit) and enums of
//! every variant shape, generics included (each type parameter gets a
//! `Mobile` bound).
//!
//! The generated code calls the same `Encoder`/`Decoder`/`Describer` methods
//! a hand-written `graft::graph::Mobile` impl would: for a struct,
//! `begin(name)`, then `field(name)` and the value for each field, then
//! `end()`; for an enum, `variant(index, name)` and, if the variant has
//! fields, the same body. On a decode error, fields decoded so far are handed
//! to `Decoder::bury_err` so that deep partial values are dropped safely.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote};
use syn::{parse_macro_input, parse_quote, Data, DeriveInput, Fields, Ident, LitStr};

/// Derives `graft::graph::Mobile`.
///
/// ```ignore
/// #[derive(graft::Mobile)]
/// struct Point { x: i32, y: i32 }
/// ```
#[proc_macro_derive(Mobile)]
pub fn derive_mobile(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(input) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// One field: how to name it in text and descriptors, its type, its binding.
struct Field {
    name: String,
    ty: syn::Type,
    member: TokenStream2,
    var: Ident,
}

fn fields_of(fields: &Fields) -> Vec<Field> {
    fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let (name, member) = match &f.ident {
                Some(id) => (id.to_string(), quote!(#id)),
                None => {
                    let idx = syn::Index::from(i);
                    (String::new(), quote!(#idx))
                }
            };
            Field {
                name,
                ty: f.ty.clone(),
                member,
                var: format_ident!("__f{}", i),
            }
        })
        .collect()
}

fn wire_min(fields: &[Field]) -> TokenStream2 {
    let tys = fields.iter().map(|f| &f.ty);
    quote!(0usize #(+ <#tys as ::graft::graph::Mobile>::WIRE_MIN)*)
}

fn describe_fields(fields: &[Field]) -> TokenStream2 {
    let calls = fields.iter().map(|f| {
        let name = LitStr::new(&f.name, Span::call_site());
        let ty = &f.ty;
        quote! {
            __d.field(#name);
            __d.describe::<#ty>();
        }
    });
    quote!(#(#calls)*)
}

/// Encodes fields bound to their `var`s (references).
fn encode_fields(fields: &[Field]) -> TokenStream2 {
    let calls = fields.iter().map(|f| {
        let name = LitStr::new(&f.name, Span::call_site());
        let var = &f.var;
        quote! {
            __e.field(#name);
            ::graft::graph::Mobile::encode(#var, __e);
        }
    });
    quote!(#(#calls)*)
}

/// Decodes fields into their `var`s, burying earlier ones on error, then
/// reads `end()` and evaluates `build`.
fn decode_fields(fields: &[Field], build: TokenStream2) -> TokenStream2 {
    let mut out = TokenStream2::new();
    let mut done: Vec<&Ident> = Vec::new();
    for f in fields {
        let name = LitStr::new(&f.name, Span::call_site());
        let ty = &f.ty;
        let var = &f.var;
        out.extend(quote! {
            let #var: #ty = match __d.field(#name).and_then(|()| <#ty as ::graft::graph::Mobile>::decode(__d)) {
                ::core::result::Result::Ok(v) => v,
                ::core::result::Result::Err(e) => return ::core::result::Result::Err(__d.bury_err((#(#done,)*), e)),
            };
        });
        done.push(var);
    }
    out.extend(quote! {
        if let ::core::result::Result::Err(e) = __d.end() {
            return ::core::result::Result::Err(__d.bury_err((#(#done,)*), e));
        }
        ::core::result::Result::Ok(#build)
    });
    out
}

/// `path { member: var, .. }`, `path(var, ..)` or `path`: builds the value
/// from the field variables, or (as a pattern) binds them.
fn with_vars(path: TokenStream2, fields: &Fields, fs: &[Field]) -> TokenStream2 {
    let vars = fs.iter().map(|f| &f.var);
    match fields {
        Fields::Named(_) => {
            let members = fs.iter().map(|f| &f.member);
            quote!(#path { #(#members: #vars),* })
        }
        Fields::Unnamed(_) => quote!(#path ( #(#vars),* )),
        Fields::Unit => path,
    }
}

fn expand(mut input: DeriveInput) -> syn::Result<TokenStream2> {
    let name = input.ident.clone();
    let name_str = LitStr::new(&name.to_string(), Span::call_site());

    // Every type parameter must be Mobile.
    let params: Vec<Ident> = input
        .generics
        .type_params()
        .map(|p| p.ident.clone())
        .collect();
    {
        let wc = input.generics.make_where_clause();
        for p in &params {
            wc.predicates.push(parse_quote!(#p: ::graft::graph::Mobile));
        }
    }
    let (impl_g, ty_g, where_c) = input.generics.split_for_impl();

    let (wire, describe, encode, decode) = match &input.data {
        Data::Struct(s) => {
            let fs = fields_of(&s.fields);
            let wire = wire_min(&fs);
            let desc = describe_fields(&fs);
            let describe = quote! {
                if __d.enter::<Self>("struct", #name_str) {
                    #desc
                    __d.leave();
                }
            };
            let pat = with_vars(quote!(#name), &s.fields, &fs);
            let enc = encode_fields(&fs);
            let encode = quote! {
                let #pat = self;
                __e.begin(#name_str);
                #enc
                __e.end();
            };
            let dec = decode_fields(&fs, pat.clone());
            let decode = quote! {
                __d.begin(#name_str)?;
                #dec
            };
            (wire, describe, encode, decode)
        }
        Data::Enum(en) => {
            let names: Vec<LitStr> = en
                .variants
                .iter()
                .map(|v| LitStr::new(&v.ident.to_string(), Span::call_site()))
                .collect();
            let mut describes = Vec::new();
            let mut enc_arms = Vec::new();
            let mut dec_arms = Vec::new();
            for (i, v) in en.variants.iter().enumerate() {
                let vid = &v.ident;
                let vname = &names[i];
                let idx = i as u32;
                let fs = fields_of(&v.fields);
                let desc = describe_fields(&fs);
                describes.push(quote! {
                    __d.variant(#vname);
                    #desc
                    __d.leave_variant();
                });
                let pat = with_vars(quote!(#name::#vid), &v.fields, &fs);
                let build = pat.clone();
                if fs.is_empty() {
                    enc_arms.push(quote! { #pat => __e.variant(#idx, #vname), });
                    dec_arms.push(quote! { #idx => ::core::result::Result::Ok(#build), });
                } else {
                    let enc = encode_fields(&fs);
                    enc_arms.push(quote! {
                        #pat => {
                            __e.variant(#idx, #vname);
                            __e.begin("");
                            #enc
                            __e.end();
                        }
                    });
                    let dec = decode_fields(&fs, build);
                    dec_arms.push(quote! {
                        #idx => {
                            __d.begin("")?;
                            #dec
                        }
                    });
                }
            }
            let describe = quote! {
                if __d.enter::<Self>("enum", #name_str) {
                    #(#describes)*
                    __d.leave();
                }
            };
            let encode = if en.variants.is_empty() {
                quote!(match *self {})
            } else {
                quote!(match self { #(#enc_arms)* })
            };
            let decode = quote! {
                match __d.variant(&[#(#names),*])? {
                    #(#dec_arms)*
                    _ => ::core::result::Result::Err(__d.invalid(concat!("no variant of ", #name_str))),
                }
            };
            (quote!(1usize), describe, encode, decode)
        }
        Data::Union(u) => {
            return Err(syn::Error::new(
                u.union_token.span,
                "Mobile cannot be derived for unions",
            ))
        }
    };

    Ok(quote! {
        impl #impl_g ::graft::graph::Mobile for #name #ty_g #where_c {
            const WIRE_MIN: usize = #wire;
            fn describe(__d: &mut ::graft::graph::Describer) {
                #describe
            }
            #[allow(unused_variables)]
            fn encode<__F: ::graft::graph::Format>(&self, __e: &mut ::graft::graph::Encoder<'_, __F>) {
                #encode
            }
            #[allow(unused_variables, unreachable_code)]
            fn decode<__S: ::graft::graph::Source>(
                __d: &mut ::graft::graph::Decoder<'_, __S>,
            ) -> ::core::result::Result<Self, ::graft::graph::DecodeError> {
                #decode
            }
        }
    })
}
